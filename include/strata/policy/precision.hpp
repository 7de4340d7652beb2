#pragma once
// Precision policies: the type replicas compute in, and how the loss is scaled.

#include <string>
#include <type_traits>

#include "strata/core/dtype.hpp"
#include "strata/policy/slot.hpp"

namespace strata::policy {

// Loss-scale choices for Precision<Compute, LossScale>.
struct NoLossScale {
  static std::string name() { return "NoLossScale"; }
};
// Keras LossScaleOptimizer rules: start at 2^15, double after 2000 finite steps, halve on overflow.
struct DynamicLossScale {
  static std::string name() { return "DynamicLossScale"; }
};
template <int Scale>
struct StaticLossScale {
  static_assert(Scale >= 1, "strata::StaticLossScale<S>: S must be at least 1");
  static constexpr float scale = static_cast<float>(Scale);
  static std::string name() { return "StaticLossScale<" + std::to_string(Scale) + ">"; }
};

template <class Compute, class LossScale = NoLossScale>
struct Precision {
  static_assert(std::is_same_v<Compute, float> || std::is_same_v<Compute, bf16> || std::is_same_v<Compute, fp16>,
                "strata::Precision<Compute, LossScale>: Compute must be float, strata::bf16 or strata::fp16");
  using policy_slot = precision_slot;
  using compute_type = Compute;
  using master_type = float;
  using loss_scale = LossScale;
  static std::string name() {
    if constexpr (std::is_same_v<Compute, float> && std::is_same_v<LossScale, NoLossScale>) return "FullPrecision";
    else if constexpr (std::is_same_v<Compute, bf16> && std::is_same_v<LossScale, NoLossScale>) return "MixedPrecision";
    else if constexpr (std::is_same_v<Compute, fp16> && std::is_same_v<LossScale, DynamicLossScale>) return "MixedPrecisionFp16";
    else return std::string("Precision<") + dtype_name<Compute> + ", " + LossScale::name() + ">";
  }
};

using FullPrecision = Precision<float>;                        // fp32 everywhere
using MixedPrecision = Precision<bf16>;                        // bf16 compute, fp32 master weights
using MixedPrecisionFp16 = Precision<fp16, DynamicLossScale>;  // fp16 compute, dynamic loss scale

}  // namespace strata::policy
