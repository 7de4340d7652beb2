#pragma once
// Adam and AdamW (Keras' formulation, epsilon outside the bias correction):
//   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon)
// AdamW first decays the weight, decoupled from the gradient: w -= lr * weight_decay * w,
// on every tensor except those named in `exclude_from_weight_decay`.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/aligned_buffer.hpp"
#include "strata/core/error.hpp"
#include "strata/optim/element_rule.hpp"
#include "strata/optim/optimizer.hpp"

namespace strata::optim {

// One weight's update, on the CPU and in the Cuda kernels (optim/element_rule.hpp): the
// bias corrections are folded into step_size and the decoupled decay into keep. Its two
// halves around the square root are what the host's loop runs a block at a time, taking the
// block's roots together (RootSplitRule in optim/element_rule.hpp).
STRATA_ELEMENT_RULE(AdamRule, struct AdamRule {
  float beta1;
  float beta2;
  float epsilon;
  float step_size;
  float keep;
  float before_root(float g, float& m, float& v) const {
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    return v;
  }
  void after_root(float& w, float, float& m, float&, float root) const {
    w = keep * w - step_size * m / (root + epsilon);
  }
  void operator()(float& w, float g, float& m, float& v) const {
    float const root = sqrtf(before_root(g, m, v));
    after_root(w, g, m, v, root);
  }
};)

namespace detail {

struct AdamMoments {
  AlignedBuffer m;
  AlignedBuffer v;

  template <class F>
  void for_each_slot(F&& f) {
    f("m", m);
    f("v", v);
  }
};

inline void check_adam(char const* name, float lr, float beta1, float beta2, float epsilon) {
  if (!(lr > 0.0f) || !std::isfinite(lr))
    throw ConfigError(strata::detail::message(name, ": lr ", lr, " must be a positive finite number"));
  if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f))
    throw ConfigError(strata::detail::message(name, ": beta1 ", beta1, " and beta2 ", beta2, " must be in [0, 1)"));
  if (!(epsilon > 0.0f))
    throw ConfigError(strata::detail::message(name, ": epsilon ", epsilon, " must be positive"));
}

// The step size with both bias corrections folded in: lr * sqrt(1 - beta2^t) / (1 - beta1^t),
// in double (the CPU update and the GPU kernel take the same float).
inline float adam_step_size(float lr, float beta1, float beta2, std::int64_t t) {
  return float(double(lr) * std::sqrt(1.0 - std::pow(double(beta2), double(t))) / (1.0 - std::pow(double(beta1), double(t))));
}

// The step's rule: lr scaled by the schedule, decay only on the tensors that take it.
inline AdamRule adam_rule(StepInfo step, float base_lr, float beta1, float beta2, float epsilon, float decay) {
  float const lr = base_lr * step.lr_scale;
  return {beta1, beta2, epsilon, adam_step_size(lr, beta1, beta2, step.t), step.decay ? 1.0f - lr * decay : 1.0f};
}

}  // namespace detail

struct Adam {
  static constexpr char const* name = "Adam";
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;

  using State = detail::AdamMoments;
  void validate() const { detail::check_adam("Adam", lr, beta1, beta2, epsilon); }
  [[nodiscard]] State make_state(std::size_t size) const { return {AlignedBuffer(size), AlignedBuffer(size)}; }
  [[nodiscard]] AdamRule rule(StepInfo step) const { return detail::adam_rule(step, lr, beta1, beta2, epsilon, 0.0f); }
  void update(std::span<float> w, std::span<float const> g, State& s, std::size_t offset, StepInfo step) const {
    apply_rule(rule(step), w, g, s, offset);
  }
};

struct AdamW {
  static constexpr char const* name = "AdamW";
  float lr = 1e-3f;
  float weight_decay = 0.004f;  // Keras' default
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;
  std::vector<std::string> exclude_from_weight_decay{};  // name substrings: {"bias"} skips the biases

  using State = detail::AdamMoments;
  [[nodiscard]] bool decays(std::string_view tensor) const { return optim::decays(exclude_from_weight_decay, tensor); }
  void validate() const {
    detail::check_adam("AdamW", lr, beta1, beta2, epsilon);
    if (!(weight_decay >= 0.0f) || !(lr * weight_decay < 1.0f))
      throw ConfigError(strata::detail::message("AdamW: weight_decay ", weight_decay,
                                                " must be >= 0 with lr * weight_decay < 1"));
  }
  [[nodiscard]] State make_state(std::size_t size) const { return {AlignedBuffer(size), AlignedBuffer(size)}; }
  [[nodiscard]] AdamRule rule(StepInfo step) const {
    return detail::adam_rule(step, lr, beta1, beta2, epsilon, weight_decay);
  }
  void update(std::span<float> w, std::span<float const> g, State& s, std::size_t offset, StepInfo step) const {
    apply_rule(rule(step), w, g, s, offset);
  }
};

}  // namespace strata::optim
