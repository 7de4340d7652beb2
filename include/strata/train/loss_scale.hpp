#pragma once
// LossScaler<LossScalePolicy>: the loss scale of a precision policy and its rules.
//
// fp16 holds magnitudes from 6e-8 to 65504, and small gradients underflow to zero. The
// loss is multiplied by `scale()` before backward and the gradients divided by it after
// the reduction; a step whose gradients came out non-finite is skipped. With
// DynamicLossScale the scale halves on each such step and doubles after a run of
// `growth_interval` finite ones (Keras' LossScaleOptimizer).

#include <algorithm>
#include <cstdint>

#include "strata/io/training_state.hpp"
#include "strata/policy/precision.hpp"

namespace strata::train {

using io::LossScaleState;

template <class Policy>
class LossScaler {
 public:
  static constexpr bool active = false;  // NoLossScale: no scaling, no check, no skipped step
  [[nodiscard]] static constexpr float scale() { return 1.0f; }
  [[nodiscard]] LossScaleState state() const { return {}; }
  void restore(LossScaleState const&) {}
  void record(bool) {}
};

template <long Initial, long Interval>
class LossScaler<policy::BasicDynamicLossScale<Initial, Interval>> {
  using P = policy::BasicDynamicLossScale<Initial, Interval>;

 public:
  static constexpr bool active = true;
  [[nodiscard]] float scale() const { return state_.scale; }
  [[nodiscard]] LossScaleState state() const { return state_; }
  void restore(LossScaleState const& s) { state_ = s; }

  // After each optimizer step (taken when `finite`, skipped otherwise).
  void record(bool finite) {
    if (!finite) {
      state_.scale = std::max(1.0f, state_.scale * 0.5f);
      state_.good_steps = 0;
      ++state_.skipped_steps;
    } else if (++state_.good_steps >= P::growth_interval) {
      state_.scale *= 2.0f;
      state_.good_steps = 0;
    }
  }

 private:
  LossScaleState state_{P::initial_scale, 0, 0};
};

template <long Scale>
class LossScaler<policy::StaticLossScale<Scale>> {
 public:
  static constexpr bool active = true;
  [[nodiscard]] static constexpr float scale() { return float(Scale); }
  [[nodiscard]] LossScaleState state() const { return {scale(), 0, skipped_}; }
  void restore(LossScaleState const& s) { skipped_ = s.skipped_steps; }
  void record(bool finite) { skipped_ += finite ? 0 : 1; }

 private:
  std::int64_t skipped_ = 0;
};

}  // namespace strata::train
