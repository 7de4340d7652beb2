#pragma once
// Lamb (You et al. 2019, "Large Batch Optimization for Deep Learning"): Adam's direction,
// scaled per tensor by the trust ratio ||w|| / ||u||, for large-batch training.
//   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + epsilon) + weight_decay * w
//   w -= lr * r * u,  r = ||w|| / ||u|| over the whole tensor (1 when either norm is 0)
// Tensors named in `exclude_from_weight_decay` get neither the decay nor the ratio
// (as in the reference implementation's exclude_from_layer_adaptation default).

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/aligned_buffer.hpp"
#include "strata/core/error.hpp"
#include "strata/optim/adam.hpp"
#include "strata/optim/element_rule.hpp"
#include "strata/optim/optimizer.hpp"

namespace strata::optim {

// One weight's two phases, on the CPU and in the Cuda kernels (optim/element_rule.hpp):
// moments() updates m and v and returns u; direction() recomputes u from them.
STRATA_ELEMENT_RULE(LambRule, struct LambRule {
  float beta1;
  float beta2;
  float m_correction;
  float v_correction;
  float epsilon;
  float decay;
  float direction(float w, float m, float v) const {
    return (m * m_correction) / (sqrtf(v * v_correction) + epsilon) + decay * w;
  }
  float moments(float w, float g, float& m, float& v) const {
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    return direction(w, m, v);
  }
};)

struct Lamb {
  static constexpr char const* name = "Lamb";
  float lr = 1e-3f;
  float weight_decay = 0.01f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-6f;
  std::vector<std::string> exclude_from_weight_decay{};  // name substrings: {"bias"} as in BERT

  using State = detail::AdamMoments;
  [[nodiscard]] bool decays(std::string_view tensor) const { return optim::decays(exclude_from_weight_decay, tensor); }
  void validate() const {
    detail::check_adam("Lamb", lr, beta1, beta2, epsilon);
    if (!(weight_decay >= 0.0f) || !std::isfinite(weight_decay))
      throw ConfigError(strata::detail::message("Lamb: weight_decay ", weight_decay, " must be >= 0"));
  }
  [[nodiscard]] State make_state(std::size_t size) const { return {AlignedBuffer(size), AlignedBuffer(size)}; }

  // The step's rule: bias corrections of step t, decay only on the tensors that take it.
  [[nodiscard]] LambRule rule(StepInfo step) const {
    double const t = double(step.t);
    return {beta1, beta2, float(1.0 / (1.0 - std::pow(double(beta1), t))),
            float(1.0 / (1.0 - std::pow(double(beta2), t))), epsilon, step.decay ? weight_decay : 0.0f};
  }

  // Updates the moments of the slice and returns its share of ||w||^2 and ||u||^2.
  NormShares moments(std::span<float const> w, std::span<float const> g, State& s, std::size_t offset,
                     StepInfo step) const {
    NormShares shares;
    float* __restrict mp = s.m.data() + offset;
    float* __restrict vp = s.v.data() + offset;
    LambRule const r = rule(step);
    for (std::size_t i = 0; i < w.size(); ++i) {
      float const u = r.moments(w[i], g[i], mp[i], vp[i]);
      shares.weight += double(w[i]) * w[i];
      shares.update += double(u) * u;
    }
    return shares;
  }

  // w -= lr * ratio * u, with u recomputed from the moments `moments` left.
  void apply(std::span<float> w, State& s, std::size_t offset, StepInfo step, float ratio) const {
    float const* __restrict mp = s.m.data() + offset;
    float const* __restrict vp = s.v.data() + offset;
    LambRule const r = rule(step);
    float const rate = step_rate(step, ratio);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= rate * r.direction(w[i], mp[i], vp[i]);
  }

  // What u is scaled by: the learning rate times the tensor's trust ratio (not for the
  // tensors excluded from decay).
  [[nodiscard]] float step_rate(StepInfo step, float ratio) const { return lr * step.lr_scale * (step.decay ? ratio : 1.0f); }

  // The trust ratio of a tensor from its summed shares.
  [[nodiscard]] static float trust_ratio(NormShares const& t) {
    double const wn = std::sqrt(t.weight), un = std::sqrt(t.update);
    return wn > 0.0 && un > 0.0 ? float(wn / un) : 1.0f;
  }

  // The whole step on a span taken as one tensor (custom loops with one replica).
  void update(std::span<float> w, std::span<float const> g, State& s, std::size_t offset, StepInfo step) const {
    float const ratio = trust_ratio(moments(w, g, s, offset, step));
    apply(w, s, offset, step, ratio);
  }
};

static_assert(LayerwiseRuleOptimizer<Lamb>);

}  // namespace strata::optim
