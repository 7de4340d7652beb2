#pragma once
// Stochastic gradient descent with optional momentum and Nesterov momentum (Keras' formulation):
//   v = momentum * v - lr * g;   w += v                        (momentum)
//   v = momentum * v - lr * g;   w += momentum * v - lr * g    (Nesterov)

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "strata/core/aligned_buffer.hpp"
#include "strata/core/error.hpp"
#include "strata/optim/element_rule.hpp"
#include "strata/optim/optimizer.hpp"

namespace strata::optim {

// One weight's update, on the CPU and in the Cuda kernels (optim/element_rule.hpp).
STRATA_ELEMENT_RULE(SgdRule, struct SgdRule {
  float rate;
  float momentum;
  bool nesterov;
  void operator()(float& w, float g) const { w -= rate * g; }
  void operator()(float& w, float g, float& v) const {
    v = momentum * v - rate * g;
    if (nesterov) w += momentum * v - rate * g;
    else w += v;
  }
};)

struct Sgd {
  static constexpr char const* name = "Sgd";
  float lr = 0.01f;
  float momentum = 0.0f;
  bool nesterov = false;

  struct State {
    AlignedBuffer velocity;  // empty without momentum

    template <class F>
    void for_each_slot(F&& f) {
      if (velocity.size() != 0) f("velocity", velocity);
    }
  };

  void validate() const {
    if (!(lr > 0.0f) || !std::isfinite(lr))
      throw ConfigError(strata::detail::message("Sgd: lr ", lr, " must be a positive finite number"));
    if (!(momentum >= 0.0f && momentum < 1.0f))
      throw ConfigError(strata::detail::message("Sgd: momentum ", momentum, " must be in [0, 1)"));
  }

  [[nodiscard]] State make_state(std::size_t size) const { return {AlignedBuffer(momentum > 0.0f ? size : 0)}; }

  // The step's rule: without momentum (no state slot) or with it (the velocity).
  [[nodiscard]] SgdRule rule(StepInfo step) const { return {lr * step.lr_scale, momentum, nesterov}; }
  void update(std::span<float> w, std::span<float const> g, State& state, std::size_t offset, StepInfo step) const {
    apply_rule(rule(step), w, g, state, offset);
  }
};

}  // namespace strata::optim
