#pragma once
// The Optimizer concept. An optimizer is an aggregate of hyper-parameters
// (`Adam{.lr = 1e-3f}`); its per-parameter state lives in a separate `State` sized to the
// arena, so the update can run on any slice of the arena: each replica updates the slice
// of the weights whose gradients it reduced.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "strata/core/aligned_buffer.hpp"

namespace strata::optim {

// Requires:
//   O::State                         per-parameter state (moments), default-constructible
//   o.make_state(n)                  state for an arena of n floats, zero-initialised
//   o.update(p, g, state, offset, t) applies optimizer step t (1-based) to the slice
//                                    p = params[offset, offset+len) with its gradient g
//   o.validate()                     throws ConfigError for hyper-parameters that cannot work
//   O::name                          "Adam": recorded in checkpoints
//   state.for_each_slot(f)           calls f(slot name, AlignedBuffer&) for each arena-sized
//                                    slot ("m", "v", "velocity"): what checkpoints save
// Ensures: update touches only p and state[offset, offset+len); slices may be updated
// concurrently by different threads.
template <class O>
concept Optimizer = requires(O const& o, typename O::State& state, std::span<float> p, std::span<float const> g,
                             std::size_t offset, std::int64_t step) {
  { o.make_state(std::size_t{}) } -> std::same_as<typename O::State>;
  o.update(p, g, state, offset, step);
  o.validate();
  { O::name } -> std::convertible_to<char const*>;
  state.for_each_slot([](char const*, AlignedBuffer&) {});
};

}  // namespace strata::optim
