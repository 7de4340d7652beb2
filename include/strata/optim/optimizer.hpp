#pragma once
// The Optimizer concept. An optimizer is an aggregate of hyper-parameters
// (`Adam{.lr = 1e-3f}`); its per-parameter state lives in a separate `State` sized to the
// arena, so the update can run on any slice of the arena: each replica updates the slice
// of the weights whose gradients it reduced.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/aligned_buffer.hpp"

namespace strata::optim {

// What an update needs to know besides the numbers: the optimizer step t (1-based, counting
// only the steps applied), the learning-rate factor of a schedule, and whether the tensor
// being updated takes weight decay. Converts from a plain step number.
struct StepInfo {
  std::int64_t t = 1;
  float lr_scale = 1.0f;
  bool decay = true;

  StepInfo() = default;
  StepInfo(std::int64_t step, float scale = 1.0f, bool decays = true)  // NOLINT: a step number is a StepInfo
      : t(step), lr_scale(scale), decay(decays) {}
};

// Requires:
//   O::State                         per-parameter state (moments), default-constructible
//   o.make_state(n)                  state for an arena of n floats, zero-initialised
//   o.update(p, g, state, offset, s) applies optimizer step s.t (a StepInfo, or a plain
//                                    step number) to p = params[offset, offset+len) with
//                                    its gradient g
//   o.validate()                     throws ConfigError for hyper-parameters that cannot work
//   O::name                          "Adam": recorded in checkpoints
//   state.for_each_slot(f)           calls f(slot name, AlignedBuffer&) for each arena-sized
//                                    slot ("m", "v", "velocity"): what checkpoints save
// Ensures: update touches only p and state[offset, offset+len); slices may be updated
// concurrently by different threads.
template <class O>
concept Optimizer = requires(O const& o, typename O::State& state, std::span<float> p, std::span<float const> g,
                             std::size_t offset, StepInfo step) {
  { o.make_state(std::size_t{}) } -> std::same_as<typename O::State>;
  o.update(p, g, state, offset, step);
  o.validate();
  { O::name } -> std::convertible_to<char const*>;
  state.for_each_slot([](char const*, AlignedBuffer&) {});
};

// Layer-wise optimizers (Lamb) scale each tensor's update by a ratio of norms taken over the
// whole tensor, which a slice cannot see. The trainer calls `moments` on every slice (it
// updates the moments and returns the slice's share of ||w||^2 and ||u||^2), adds the shares
// of each tensor across replicas, then calls `apply` with the tensor's ratio.
struct NormShares {
  double weight = 0.0;  // sum of w^2
  double update = 0.0;  // sum of u^2

  NormShares& operator+=(NormShares const& o) {
    weight += o.weight;
    update += o.update;
    return *this;
  }
};

template <class O>
concept LayerwiseOptimizer = Optimizer<O> && requires(O const& o, typename O::State& state, std::span<float> p,
                                                      std::span<float const> g, std::size_t offset, StepInfo step) {
  { o.moments(std::span<float const>(p), g, state, offset, step) } -> std::same_as<NormShares>;
  o.apply(p, state, offset, step, 1.0f);
};

// Which tensors take weight decay: every one, except those whose name contains one of
// `exclude` (Keras' exclude_from_weight_decay). {"bias"} leaves the biases alone.
inline bool decays(std::vector<std::string> const& exclude, std::string_view tensor) {
  for (auto const& pattern : exclude)
    if (!pattern.empty() && tensor.find(pattern) != std::string_view::npos) return false;
  return true;
}

}  // namespace strata::optim
