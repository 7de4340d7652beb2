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
// Keras LossScaleOptimizer rules: start at `Initial` (2^15), double after `GrowthInterval`
// (2000) consecutive steps with finite gradients; on a non-finite gradient skip the step
// and halve the scale (never below 1).
template <long Initial = 32768, long GrowthInterval = 2000>
struct BasicDynamicLossScale {
  static_assert(Initial >= 1, "strata::BasicDynamicLossScale<Initial, GrowthInterval>: Initial must be at least 1");
  static_assert(GrowthInterval >= 1,
                "strata::BasicDynamicLossScale<Initial, GrowthInterval>: GrowthInterval must be at least 1");
  static constexpr float initial_scale = static_cast<float>(Initial);
  static constexpr long growth_interval = GrowthInterval;
  static std::string name() {
    if (Initial == 32768 && GrowthInterval == 2000) return "DynamicLossScale";
    return "DynamicLossScale<" + std::to_string(Initial) + ", " + std::to_string(GrowthInterval) + ">";
  }
};
using DynamicLossScale = BasicDynamicLossScale<>;

// A fixed scale; a step whose gradients are not finite is still skipped.
template <long Scale>
struct StaticLossScale {
  static_assert(Scale >= 1, "strata::StaticLossScale<S>: S must be at least 1");
  static constexpr float initial_scale = static_cast<float>(Scale);
  static std::string name() { return "StaticLossScale<" + std::to_string(Scale) + ">"; }
};

template <class T>
inline constexpr bool is_loss_scale = std::is_same_v<T, NoLossScale>;
template <long I, long G>
inline constexpr bool is_loss_scale<BasicDynamicLossScale<I, G>> = true;
template <long S>
inline constexpr bool is_loss_scale<StaticLossScale<S>> = true;

template <class Compute, class LossScale = NoLossScale>
struct Precision {
  static_assert(is_loss_scale<LossScale>,
                "strata::Precision<Compute, LossScale>: LossScale must be NoLossScale, DynamicLossScale, "
                "BasicDynamicLossScale<Initial, GrowthInterval> or StaticLossScale<S>");
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
