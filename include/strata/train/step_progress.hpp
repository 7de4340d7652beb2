#pragma once
// StepProgress: where a step runner stands, shared by the CPU's and the device's, so both
// group micro-batches, count optimizer steps, skip steps and resume the same way: the
// micro-batch within the accumulation group, the samples it holds, the optimizer steps
// applied (Adam's t), the micro-batches seen (the dropout counter) and the loss scale.

#include <cmath>
#include <cstdint>
#include <optional>

#include "strata/core/error.hpp"
#include "strata/core/random.hpp"
#include "strata/train/loss_scale.hpp"

namespace strata::train {

// Options of the update that are not policies.
struct StepOptions {
  float clip_global_norm = 0.0f;  // > 0: scale the reduced gradient so its global L2 norm is at most this
};

template <class Config>
class StepProgress {
 public:
  using scaler_type = LossScaler<typename Config::precision::loss_scale>;
  static constexpr int accumulation_steps = Config::accumulation_steps;

  [[nodiscard]] std::int64_t optimizer_steps() const { return step_; }
  [[nodiscard]] std::int64_t micro_batches() const { return micro_batches_seen_; }
  // True when no accumulation group is half done (what a checkpoint can capture).
  [[nodiscard]] bool at_step_boundary() const { return micro_ == 0; }
  // Whether the last group's update was applied (false: skipped for a non-finite gradient).
  [[nodiscard]] bool last_step_applied() const { return applied_; }
  // The loss scale's state, or none for a precision without one.
  [[nodiscard]] std::optional<LossScaleState> loss_scale() const {
    if constexpr (scaler_type::active) return scaler_.state();
    else return std::nullopt;
  }

 protected:
  StepProgress(int max_batch, std::uint64_t seed, StepOptions options)
      : max_batch_(max_batch), seed_(seed), options_(options) {
    if (!(options.clip_global_norm >= 0.0f) || !std::isfinite(options.clip_global_norm))
      throw ConfigError(strata::detail::message("clip_global_norm ", options.clip_global_norm,
                                                " must be a finite number >= 0 (0 turns clipping off)"));
  }

  // What one micro-batch of `size` samples does.
  struct MicroBatch {
    bool accumulate = false;       // add to the gradients of earlier micro-batches of the group
    bool apply = false;            // the optimizer runs after this one
    std::uint64_t dropout_seed = 0;
    float loss_scale = 1.0f;
  };
  MicroBatch begin_micro_batch(int size) {
    if (size > max_batch_ || size < 1)
      throw ConfigError(strata::detail::message("StepRunner: a batch of ", size,
                                                " samples; this runner was built for global batches of 1..", max_batch_));
    samples_in_group_ += size;
    return {micro_ > 0, micro_ + 1 == accumulation_steps, mix64(seed_, std::uint64_t(micro_batches_seen_++)),
            scaler_.scale()};
  }
  void end_micro_batch(bool applied_group) {
    if (applied_group) finish_step();
    else ++micro_;
  }
  [[nodiscard]] bool group_pending() const { return micro_ > 0; }

  // After every replica updated (or skipped) its slice.
  void finish_step() {
    if (applied_) ++step_;
    if constexpr (scaler_type::active) scaler_.record(applied_);
    micro_ = 0;
    samples_in_group_ = 0;
  }

  void restart(std::int64_t steps, std::int64_t micro_batches, std::optional<LossScaleState> loss_scale) {
    step_ = steps;
    micro_batches_seen_ = micro_batches;
    micro_ = 0;
    samples_in_group_ = 0;
    if (loss_scale) scaler_.restore(*loss_scale);
  }

  // The factor that turns summed, loss-scaled gradients into the group's mean gradient.
  [[nodiscard]] float gradient_scale() const { return 1.0f / (float(samples_in_group_) * scaler_.scale()); }
  // Whether the whole reduced gradient must be seen before any weight moves.
  [[nodiscard]] bool needs_global_norm() const { return scaler_type::active || options_.clip_global_norm > 0.0f; }

  // Given the squared norm of the whole reduced gradient (the same on every replica): whether
  // to apply the step, and the clipping factor. Replica 0 records the decision.
  struct Decision {
    bool apply = true;
    float factor = 1.0f;
  };
  Decision decide(double squared_norm, int replica) {
    bool const finite = std::isfinite(squared_norm);  // an inf or NaN anywhere makes the sum non-finite
    if (replica == 0) applied_ = finite || !scaler_type::active;
    if (!finite && scaler_type::active) return {false, 1.0f};  // skipped on every replica alike
    float const clip = options_.clip_global_norm;
    float const factor = clip > 0.0f && finite && std::sqrt(squared_norm) > clip ? float(clip / std::sqrt(squared_norm)) : 1.0f;
    return {true, factor};
  }

  int max_batch_ = 0;
  std::uint64_t seed_ = 0;
  StepOptions options_;
  scaler_type scaler_{};
  std::int64_t step_ = 0;  // optimizer steps applied

 private:
  int micro_ = 0;                      // micro-batches accumulated in the current group
  std::int64_t samples_in_group_ = 0;  // samples whose gradients the current group holds
  std::int64_t micro_batches_seen_ = 0;
  bool applied_ = true;                // whether the last group's update was applied
};

}  // namespace strata::train
