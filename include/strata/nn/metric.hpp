#pragma once
// Metrics. Accuracy counts samples whose largest output is at the label's index.

#include <concepts>
#include <cstdint>

#include "strata/core/backend.hpp"
#include "strata/core/tensor.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// Accuracy's count on a device: the CPU's here; strata/cuda.hpp adds the Cuda one (nn/loss_cuda.hpp).
template <class B>
struct AccuracyMath {
  static_assert(policy::dependent_false<B>, "strata::Accuracy: no math for this backend; include its device header");
};

#include "strata/core/detail/gcc_avx512_warnings_off.hpp"  // Eigen's max, exp and tanh packets below
template <class B>
  requires std::same_as<B, CpuBackend>
struct AccuracyMath<B> {
  // Number of samples whose largest logit is at the label's position.
  static std::int64_t count_correct(ConstMatrixView logits, ConstMatrixView labels) {
    std::int64_t correct = 0;
    for (int j = 0; j < logits.cols; ++j) {
      Eigen::Index best = 0;
      strata::detail::eigen(logits).col(j).maxCoeff(&best);
      correct += (best == Eigen::Index(labels.data[j]));
    }
    return correct;
  }
};
#include "strata/core/detail/gcc_avx512_warnings_on.hpp"

struct Accuracy {
  static constexpr char const* name = "accuracy";
  template <Backend B>
  static std::int64_t count_correct(ConstMatrixView logits, ConstMatrixView labels) {
    return AccuracyMath<B>::count_correct(logits, labels);
  }
};

}  // namespace strata::nn
