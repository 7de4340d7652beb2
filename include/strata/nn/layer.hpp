#pragma once
// The Layer concept: what a type must provide to be a layer of a Sequential (or of a
// Residual block), and the scratch buffers a layer may declare.

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
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
  int columns_per_sample = 1;     // of the layer's input: its first column is first_sample * this
  // Packed sequences (Bert's unpadded layout): the number of tokens of each sample of this
  // call, whose tokens then fill the columns one sample after another, with no padding; and
  // each column's place in the padded global batch (sample x MaxLen + token), so that a
  // dropout mask does not depend on the packing. Null: one column per token of a fixed
  // number per sample (columns_per_sample).
  float const* sequence_lengths = nullptr;
  float const* column_positions = nullptr;
  // False where no backward pass follows (evaluate, predict): mixed precision then skips
  // storing the activations and scratch that only backward reads.
  bool backward_follows = true;

  // The context of a layer whose input has `columns` columns per sample of this one's.
  [[nodiscard]] ForwardContext for_columns(int columns) const {
    ForwardContext c = *this;
    c.columns_per_sample *= columns;
    return c;
  }
  [[nodiscard]] std::int64_t first_column() const { return first_sample * columns_per_sample; }
  // The context of layer `index` of a chain: its own random stream, so that two dropout
  // layers of the same width never draw the same mask.
  [[nodiscard]] ForwardContext for_layer(std::size_t index) const {
    ForwardContext c = *this;
    c.seed = mix64(seed, 0x1a7e0000u + index);
    return c;
  }
};

inline constexpr int any_width = -1;

// A named block of a layer's parameters, for checkpoints: `shape` (row-major) over the
// floats [offset, offset + product(shape)) of the layer's block of the arena.
struct ParameterTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::size_t offset = 0;
  // Read only as a factor of the backend's matrix products (B::gemm), never element by
  // element: where those products read a bf16 copy of the weights, the trainer keeps no
  // rounded float copy of it (train/replica_pass.hpp).
  bool read_by_products_only = false;
  // Whether a product may read it transposed (a Dense kernel: dx = W^T dy); `possible` where
  // the layer does not say. `for_input_gradient`: only while its layer's input gradient is
  // asked for. A Chain keeps that for its first layer only (its own input gradient decides);
  // a Sequential, whose first layer is never asked for one, makes it `never`, and where
  // strata's bf16 kernel reads the forward product's packed copy, such a tensor keeps no
  // other copy (train/replica_pass.hpp).
  enum class TransposedReads : std::uint8_t { possible, for_input_gradient, never };
  TransposedReads read_transposed = TransposedReads::possible;
};

// The number of elements of a tensor of `shape`.
inline std::size_t element_count(std::vector<std::int64_t> const& shape) {
  std::size_t count = 1;
  for (auto d : shape) count *= std::size_t(d);
  return count;
}

// One buffer a layer asks its workspace for: `rows` × (`columns_per_sample` × samples).
//   kept        written by forward, read by backward (dropout's mask): under mixed precision
//               stored in the 16-bit compute type
//   kept_float  the same, always stored in float (per-sample statistics such as a norm's 1/sigma)
//   temporary   used within one forward or one backward call only (a block's gradients)
struct ScratchBuffer {
  enum class Keep : std::uint8_t { kept, kept_float, temporary };
  int rows = 0;
  int columns_per_sample = 1;
  Keep keep = Keep::kept;
};

// The views of a layer's scratch buffers for the current batch, in the order it declared them.
using Scratch = std::span<MatrixView const>;

// A layer's scratch buffers for input width `width` and `columns` columns per sample: its
// `L::scratch(width, columns)`, or none.
template <class L>
constexpr auto scratch_of(int width, int columns) {
  if constexpr (requires { L::scratch(width, columns); }) return L::scratch(width, columns);
  else return std::array<ScratchBuffer, 0>{};
}
template <class L>
inline constexpr std::size_t scratch_count = scratch_of<L>(1, 1).size();

// How many floats of each of a layer's scratch views, from the view's start, its last
// forward wrote for its backward: L::scratch_in_use(scratch, floats) fills floats[k] for view
// k, given the views that forward wrote; by default every view's size. A layer that fills
// only a prefix of a buffer says so: Bert packs the real tokens at the start of buffers sized
// for the padding, attention keeps n x n probabilities per sample of n tokens. A mixed-
// precision pass then stores in 16 bits, and loads back, only those floats.
template <class L>
void scratch_in_use(L const& layer, Scratch scratch, std::span<std::size_t> floats) {
  if constexpr (requires { layer.scratch_in_use(scratch, floats); }) {
    layer.scratch_in_use(scratch, floats);
  } else {
    for (std::size_t k = 0; k < scratch.size(); ++k) floats[k] = scratch[k].size();
  }
}

// Whether a layer computes only some of its output columns, packed from the start (Bert:
// each sample's tokens before its padding): L::packed_columns(x) says how many for the
// samples x. Each of its scratch buffers whose columns per sample are a multiple of its
// output's then holds (that multiple) columns per packed column, from its start; the
// others hold theirs for every sample. As a Sequential's first layer under mixed precision,
// it lets a chunk of samples be as large as their packed columns fit, not their padding.
template <class L>
concept PacksColumns = requires(L const& layer, ConstMatrixView x) {
  { layer.packed_columns(x) } -> std::convertible_to<std::size_t>;
};

// Whether a layer's input holds integer ids that must reach it exactly (an embedding's).
template <class L>
inline constexpr bool takes_ids = [] {
  if constexpr (requires { L::takes_ids; }) return bool(L::takes_ids);
  else return false;
}();

// What a layer's backward reads of its forward pass besides its kept scratch: its input x,
// its output y, both (the default) or neither. Under mixed precision a Sequential keeps an
// activation in 16 bits only where a backward reads it, so a Dense followed by a Relu keeps
// one activation instead of two (Dense reads its input, Relu its output).
struct BackwardReads {
  bool input = true;
  bool output = true;
};
template <class L>
inline constexpr BackwardReads backward_reads = [] {
  if constexpr (requires { L::backward_reads; }) return BackwardReads(L::backward_reads);
  else return BackwardReads{};
}();

// Whether every value a layer outputs, forward (y from x) and backward (dx from dy), is one of
// its inputs' values or zero (Relu: y = max(x, 0), dx = dy or 0). Then what a 16-bit type
// holds on the way in, it holds on the way out, and a mixed-precision pass need not round the
// layer's outputs to it: rounding them would change no bit.
template <class L>
inline constexpr bool selects_values = [] {
  if constexpr (requires { L::selects_values; }) return bool(L::selects_values);
  else return false;
}();

// Whether a layer's backward on the host can run in place from its output alone:
// L::backward_in_place(y, d, n) turns d = dy into d = dx over n elements, y being the layer's
// output as float or in the 16-bit type a mixed pass keeps it in (Relu: d = d where y > 0;
// Tanh: d = d (1 - y^2)).
// A Sequential then touches only y and d, where backward touches y, dy, dx and, under mixed
// precision, a float copy of y (docs/benchmarks.md, "ReLU's backward in place").
template <class L, class T>
inline constexpr bool backward_in_place =
    requires(T const* y, float* d, std::size_t n) { L::template backward_in_place<T>(y, d, n); };

// Columns per sample of a layer's output for `columns` per sample of its input: a layer
// that turns a sequence of tokens into one vector (a pooler) declares L::output_columns.
template <class L>
constexpr int output_columns_of(int columns) {
  if constexpr (requires { L::output_columns(columns); }) return L::output_columns(columns);
  else return columns;
}

// Requires:
//   L::input_width        fixed input width, or any_width when the layer takes its width from the previous one
//   L::output_width(w)    output width for input width w (constexpr)
//   L::parameter_count(w) number of floats of parameters for input width w (constexpr)
//   L::name()             a readable name for messages ("Dense<784, 256>")
//   l.initialize(params, w, rng)
//   l.forward<B>(params, x, y, scratch, context)            y from x; may write its kept scratch
//   l.backward<B>(params, grads, x, y, scratch, dy, dx, accumulate)
//                         d(params) written (or added when `accumulate`) and, when dx.data
//                         != nullptr, dx; reads what forward kept
//   B is the device's backend (core/backend.hpp); a layer's own math for a device sits
//   beside the layer, selected by B (see Relu's ReluMath<B>).
// Optional:
//   L::scratch(w, columns)      a std::array of ScratchBuffer (default: none)
//   L::output_columns(columns)  columns per sample of the output (default: those of the input)
//   L::kind, L::parameter_tensors(w)  the names of its parameters (required when it has any)
//   L::takes_ids = true          its input holds integer ids (token ids), which mixed precision
//                                must not round to 16 bits
//   L::backward_reads            a BackwardReads: what backward reads of x and y (default: both);
//                                under mixed precision, what it says it does not read it is given
//                                as a view whose data is null
//   L::selects_values = true     its outputs only select among its inputs' values and zero
//                                (above): mixed precision skips rounding them
//   L::backward_in_place<T>(y, d, n)  its backward as d = dx from d = dy and y alone (above),
//                                which a Sequential on the host calls instead of backward
//   l.scratch_in_use(scratch, floats)  the floats of each scratch view that forward wrote for
//                                backward, where less than the view (above)
//   l.packed_columns(x)          the output columns it computes for the samples x, where it
//                                packs them (PacksColumns, above)
template <class L>
concept Layer = requires(L const& layer, float* p, float const* cp, Rng& rng, ConstMatrixView x, MatrixView y,
                         Scratch scratch, ForwardContext const& context) {
  { L::input_width } -> std::convertible_to<int>;
  { L::output_width(1) } -> std::convertible_to<int>;
  { L::parameter_count(1) } -> std::convertible_to<std::size_t>;
  { L::name() } -> std::convertible_to<std::string>;
  layer.initialize(p, 1, rng);
  layer.template forward<CpuBackend>(cp, x, y, scratch, context);
  layer.template backward<CpuBackend>(cp, p, x, x, scratch, x, y, true);
};

// Shape-preserving layers without parameters share this.
struct ParameterFreeLayer {
  static constexpr int input_width = any_width;
  static constexpr int output_width(int width) { return width; }
  static constexpr std::size_t parameter_count(int) { return 0; }
  void initialize(float*, int, Rng&) const {}
};

}  // namespace strata::nn
