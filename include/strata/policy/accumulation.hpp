#pragma once
// Gradient accumulation: K micro-batches per optimizer step.

#include <string>

#include "strata/policy/slot.hpp"

namespace strata::policy {

template <int K>
struct GradAccum {
  static_assert(K >= 1, "strata::GradAccum<K>: K must be at least 1 (micro-batches per optimizer step)");
  using policy_slot = accumulation_slot;
  static constexpr int steps = K;
  static std::string name() { return "GradAccum<" + std::to_string(K) + ">"; }
};

}  // namespace strata::policy
