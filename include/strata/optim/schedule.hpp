#pragma once
// Learning-rate schedules and the linear-scaling rule.
//
// A schedule maps the 0-based index of an optimizer step (steps already applied, Keras'
// `optimizer.iterations`) to a factor of the optimizer's `lr`. `scheduled(opt, schedule)`
// wraps an optimizer so every update runs at lr * schedule(step), with no other change:
// the name, state and checkpoint slots are the optimizer's own.
//
//   auto opt = strata::scheduled(strata::Adam{.lr = strata::linear_scaling(1e-3f, 256, 2048)},
//                                strata::WarmupLinearDecay{.warmup_steps = 500, .total_steps = 10000});

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numbers>
#include <span>
#include <string_view>
#include <utility>

#include "strata/core/error.hpp"
#include "strata/optim/optimizer.hpp"

namespace strata::optim {

// Requires: s(step) -> factor for a 0-based step; s.validate() throws ConfigError.
template <class S>
concept Schedule = requires(S const& s, std::int64_t step) {
  { s(step) } -> std::convertible_to<float>;
  s.validate();
};

struct ConstantSchedule {
  float operator()(std::int64_t) const { return 1.0f; }
  void validate() const {}
};

// Linear warm-up from 0 over `warmup_steps`, then linear decay to `end_factor` at
// `total_steps`, constant after (the BERT schedule; Hugging Face's get_linear_schedule_with_warmup).
struct WarmupLinearDecay {
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  float end_factor = 0.0f;

  float operator()(std::int64_t step) const {
    if (step < warmup_steps) return float(step) / float(warmup_steps);
    double const left = double(total_steps - step) / double(total_steps - warmup_steps);
    return float(end_factor + (1.0 - end_factor) * std::max(0.0, left));
  }
  void validate() const {
    if (warmup_steps < 0 || total_steps <= warmup_steps || !(end_factor >= 0.0f && end_factor <= 1.0f))
      throw ConfigError(strata::detail::message("WarmupLinearDecay: warmup_steps ", warmup_steps, ", total_steps ",
                                                total_steps, ", end_factor ", end_factor,
                                                "; need 0 <= warmup_steps < total_steps and end_factor in [0, 1]"));
  }
};

// Optional linear warm-up, then cosine decay from 1 to `alpha` over `decay_steps`
// (Keras' CosineDecay with warmup_target = lr).
struct CosineDecay {
  std::int64_t decay_steps = 1;
  float alpha = 0.0f;
  std::int64_t warmup_steps = 0;

  float operator()(std::int64_t step) const {
    if (step < warmup_steps) return float(step) / float(warmup_steps);
    double const progress = std::min(1.0, double(step - warmup_steps) / double(decay_steps));
    return float(alpha + (1.0 - alpha) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
  }
  void validate() const {
    if (decay_steps < 1 || warmup_steps < 0 || !(alpha >= 0.0f && alpha <= 1.0f))
      throw ConfigError(strata::detail::message("CosineDecay: decay_steps ", decay_steps, ", warmup_steps ", warmup_steps,
                                                ", alpha ", alpha,
                                                "; need decay_steps >= 1, warmup_steps >= 0, alpha in [0, 1]"));
  }
};

// factor^(step / every_steps), rounded down: a staircase (Keras' ExponentialDecay with staircase=True).
struct StepDecay {
  std::int64_t every_steps = 1;
  float factor = 0.1f;

  float operator()(std::int64_t step) const { return float(std::pow(double(factor), double(step / every_steps))); }
  void validate() const {
    if (every_steps < 1 || !(factor > 0.0f && factor <= 1.0f))
      throw ConfigError(strata::detail::message("StepDecay: every_steps ", every_steps, ", factor ", factor,
                                                "; need every_steps >= 1 and factor in (0, 1]"));
  }
};

template <Optimizer Opt, Schedule S>
struct Scheduled {
  static constexpr char const* name = Opt::name;
  using State = typename Opt::State;
  Opt optimizer;
  S schedule;

  void validate() const {
    optimizer.validate();
    schedule.validate();
  }
  [[nodiscard]] State make_state(std::size_t n) const { return optimizer.make_state(n); }
  [[nodiscard]] bool decays(std::string_view tensor) const {
    if constexpr (requires { optimizer.decays(tensor); }) return optimizer.decays(tensor);
    else return true;
  }
  // The learning-rate factor of step `info.t` (1-based) folded into the step.
  [[nodiscard]] StepInfo at(StepInfo info) const {
    info.lr_scale *= schedule(info.t - 1);
    return info;
  }
  void update(std::span<float> w, std::span<float const> g, State& s, std::size_t offset, StepInfo step) const {
    optimizer.update(w, g, s, offset, at(step));
  }
  // The optimizer's element rule at the scheduled rate: what the Cuda device runs.
  [[nodiscard]] auto rule(StepInfo step) const
    requires requires { optimizer.rule(step); }
  {
    return optimizer.rule(at(step));
  }
  [[nodiscard]] float step_rate(StepInfo step, float ratio) const
    requires requires { optimizer.step_rate(step, ratio); }
  {
    return optimizer.step_rate(at(step), ratio);
  }
  NormShares moments(std::span<float const> w, std::span<float const> g, State& s, std::size_t offset,
                     StepInfo step) const
    requires LayerwiseOptimizer<Opt>
  {
    return optimizer.moments(w, g, s, offset, at(step));
  }
  void apply(std::span<float> w, State& s, std::size_t offset, StepInfo step, float ratio) const
    requires LayerwiseOptimizer<Opt>
  {
    optimizer.apply(w, s, offset, at(step), ratio);
  }
  [[nodiscard]] static float trust_ratio(NormShares const& t)
    requires LayerwiseOptimizer<Opt>
  {
    return Opt::trust_ratio(t);
  }
};

template <Optimizer Opt, Schedule S>
Scheduled<Opt, S> scheduled(Opt optimizer, S schedule) {
  return {std::move(optimizer), schedule};
}

// The learning rate of optimizer step `step` (0-based: steps already applied), schedule
// included; NaN for an optimizer with no `lr`. What monitoring logs as "learning_rate".
template <class Opt>
double learning_rate(Opt const& optimizer, std::int64_t step) {
  if constexpr (requires { optimizer.schedule(step); }) return learning_rate(optimizer.optimizer, step) * double(optimizer.schedule(step));
  else if constexpr (requires { optimizer.lr; }) return double(optimizer.lr);
  else return std::numeric_limits<double>::quiet_NaN();
}

// The linear-scaling rule (Goyal et al. 2017): when the global batch grows k-fold, grow the
// learning rate k-fold; pair it with a warm-up. `batch` is the effective batch per optimizer
// step: batch_size x GradAccum's K.
inline float linear_scaling(float base_lr, std::int64_t base_batch, std::int64_t batch) {
  if (!(base_lr > 0.0f) || base_batch < 1 || batch < 1)
    throw ConfigError(strata::detail::message("linear_scaling: base_lr ", base_lr, ", base_batch ", base_batch, ", batch ",
                                              batch, "; need a positive rate and batch sizes >= 1"));
  return base_lr * float(batch) / float(base_batch);
}

}  // namespace strata::optim
