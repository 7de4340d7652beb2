#pragma once
// Metrics. Accuracy counts samples whose largest output is at the label's index.

#include <cstdint>

#include "strata/core/backend.hpp"
#include "strata/core/tensor.hpp"

namespace strata::nn {

struct Accuracy {
  static constexpr char const* name = "accuracy";
  template <Backend B>
  static std::int64_t count_correct(ConstMatrixView logits, ConstMatrixView labels) {
    return B::count_correct(logits, labels);
  }
};

}  // namespace strata::nn
