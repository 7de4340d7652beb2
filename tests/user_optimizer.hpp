#pragma once
// An optimizer a user writes: RMSprop (Hinton's form, epsilon outside the root), in the
// user's own namespace, with its update as an element rule. The CPU tests check it against
// its closed form; the Cuda tests compile its rule with NVRTC and train with it on the GPU.
#include <cmath>
#include <cstddef>
#include <span>

#include "strata/core/aligned_buffer.hpp"
#include "strata/core/error.hpp"
#include "strata/optim/element_rule.hpp"

namespace user {

STRATA_ELEMENT_RULE(RmsRule, struct RmsRule {
  float rate;
  float rho;
  float epsilon;
  void operator()(float& w, float g, float& ms) const {
    ms = rho * ms + (1.0f - rho) * g * g;
    w -= rate * g / (sqrtf(ms) + epsilon);
  }
};)

struct Rmsprop {
  static constexpr char const* name = "Rmsprop";
  float lr = 1e-3f;
  float rho = 0.9f;
  float epsilon = 1e-7f;

  struct State {
    strata::AlignedBuffer ms;
    template <class F>
    void for_each_slot(F&& f) {
      f("ms", ms);
    }
  };
  void validate() const {
    if (!(lr > 0.0f)) throw strata::ConfigError("Rmsprop: lr must be positive");
  }
  [[nodiscard]] State make_state(std::size_t n) const { return {strata::AlignedBuffer(n)}; }
  [[nodiscard]] RmsRule rule(strata::optim::StepInfo step) const { return {lr * step.lr_scale, rho, epsilon}; }
  void update(std::span<float> w, std::span<float const> g, State& s, std::size_t offset,
              strata::optim::StepInfo step) const {
    strata::optim::apply_rule(rule(step), w, g, s, offset);
  }
};

}  // namespace user
