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
#include "strata/optim/optimizer.hpp"

namespace strata::optim {

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

  void update(std::span<float> w, std::span<float const> g, State& state, std::size_t offset, StepInfo step) const {
    float const rate = lr * step.lr_scale;
    std::size_t const n = w.size();
    float* __restrict wp = w.data();
    float const* __restrict gp = g.data();
    if (momentum == 0.0f) {
      for (std::size_t i = 0; i < n; ++i) wp[i] -= rate * gp[i];
      return;
    }
    float* __restrict vp = state.velocity.data() + offset;
    if (nesterov) {
      for (std::size_t i = 0; i < n; ++i) {
        vp[i] = momentum * vp[i] - rate * gp[i];
        wp[i] += momentum * vp[i] - rate * gp[i];
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        vp[i] = momentum * vp[i] - rate * gp[i];
        wp[i] += vp[i];
      }
    }
  }
};

}  // namespace strata::optim
