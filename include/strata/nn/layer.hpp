#pragma once
// The Layer concept: what a type must provide to be a layer of a Sequential.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/backend.hpp"
#include "strata/core/random.hpp"
#include "strata/core/tensor.hpp"

namespace strata::nn {

// Per-call facts a forward pass may depend on.
struct ForwardContext {
  bool training = false;          // dropout is active only when training
  std::uint64_t seed = 0;         // differs every step; mixes the run seed and the step number
  std::int64_t first_sample = 0;  // index of the shard's first sample within the global batch
};

inline constexpr int any_width = -1;

// A named block of a layer's parameters, for checkpoints: `shape` (row-major) over the
// floats [offset, offset + product(shape)) of the layer's block of the arena.
struct ParameterTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::size_t offset = 0;
};

// The number of elements of a tensor of `shape`.
inline std::size_t element_count(std::vector<std::int64_t> const& shape) {
  std::size_t count = 1;
  for (auto d : shape) count *= std::size_t(d);
  return count;
}

// Requires:
//   L::input_width       fixed input width, or any_width when the layer takes its width from the previous one
//   L::output_width(w)   output width for input width w (constexpr)
//   L::parameter_count(w) number of floats of parameters for input width w (constexpr)
//   L::uses_aux          whether the layer keeps a per-replica buffer of the output's shape (dropout's mask)
//   L::name()            a readable name for messages ("Dense<784, 256>")
//   l.initialize(params, w, rng), l.forward<B>(...), l.backward<B>(...) as in Dense.
//   A layer with parameters also names them for checkpoints: L::kind ("dense") and
//   L::parameter_tensors(w), a list of ParameterTensor covering all its parameters.
// Ensures: forward writes y from x alone; backward writes d(params) (overwriting, or adding
// when `accumulate`) and, when dx.data != nullptr, dx.
template <class L>
concept Layer = requires(L const& layer, float* p, Rng& rng) {
  { L::input_width } -> std::convertible_to<int>;
  { L::output_width(1) } -> std::convertible_to<int>;
  { L::parameter_count(1) } -> std::convertible_to<std::size_t>;
  { L::uses_aux } -> std::convertible_to<bool>;
  { L::name() } -> std::convertible_to<std::string>;
  layer.initialize(p, 1, rng);
};

// Shape-preserving layers without parameters share this.
struct ParameterFreeLayer {
  static constexpr int input_width = any_width;
  static constexpr int output_width(int width) { return width; }
  static constexpr std::size_t parameter_count(int) { return 0; }
  static constexpr bool uses_aux = false;
  void initialize(float*, int, Rng&) const {}
};

}  // namespace strata::nn
