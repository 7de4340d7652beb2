#pragma once
// Dropout: in training, zeroes each activation with probability `rate` and scales the rest
// by 1/(1-rate); at inference it is the identity. The mask of a column depends only on the
// step seed and the column's position in the global batch (a sample's, or a token's where a
// sample has several columns), so any sharding or chunking draws the same mask.

#include <array>
#include <concepts>
#include <string>

#include "strata/core/backend.hpp"
#include "strata/core/random.hpp"
#include "strata/core/error.hpp"
#include "strata/nn/layer.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// Dropout's math on a device: the CPU's here; strata/cuda.hpp adds the Cuda one
// (nn/dropout_cuda.hpp).
template <class B>
struct DropoutMath {
  static_assert(policy::dependent_false<B>, "strata::Dropout: no math for this backend; include its device header");
};

template <class B>
  requires std::same_as<B, CpuBackend>
struct DropoutMath<B> {
  // Inverted dropout. The mask of element (row, column) depends only on (seed, column, row),
  // so sharding a batch across replicas draws the same mask as one replica would.
  // `positions`, where given, are the columns' places in the batch (packed sequences);
  // otherwise column j is at first_column + j.
  static void dropout(ConstMatrixView x, MatrixView y, MatrixView mask, float rate, std::uint64_t seed,
                      std::int64_t first_column, float const* positions = nullptr) {
    float const keep_scale = 1.0f / (1.0f - rate);
    for (int j = 0; j < x.cols; ++j) {
      std::int64_t const at = positions ? std::int64_t(positions[j]) : first_column + j;
      std::uint64_t const column_seed = mix64(seed, std::uint64_t(at));
      for (int i = 0; i < x.rows; ++i) {
        std::size_t const k = std::size_t(j) * std::size_t(x.rows) + std::size_t(i);
        float const m = uniform01(mix64(column_seed, std::uint64_t(i))) >= rate ? keep_scale : 0.0f;
        mask.data[k] = m;
        y.data[k] = x.data[k] * m;
      }
    }
  }
  static void multiply(ConstMatrixView a, ConstMatrixView b, MatrixView out) {
    strata::detail::eigen(out).array() = strata::detail::eigen(a).array() * strata::detail::eigen(b).array();
  }
};

struct Dropout {
  float rate = 0.5f;

  static constexpr int input_width = any_width;
  static constexpr int output_width(int width) { return width; }
  static constexpr std::size_t parameter_count(int) { return 0; }
  // The mask, kept from forward for backward.
  static constexpr std::array<ScratchBuffer, 1> scratch(int width, int columns) { return {{{width, columns}}}; }
  static std::string name() { return "Dropout"; }
  static constexpr BackwardReads backward_reads{.input = false, .output = false};  // only its kept mask

  void initialize(float*, int, Rng&) const {
    if (!(rate >= 0.0f && rate < 1.0f))
      throw ConfigError(strata::detail::message("Dropout: rate ", rate, " is outside [0, 1); use e.g. Dropout{0.2f}"));
  }

  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch mask, ForwardContext const& context) const {
    if (!(context.training && rate > 0.0f)) {
      B::copy(x, y);
    } else if (context.column_positions == nullptr) {
      DropoutMath<B>::dropout(x, y, mask[0], rate, context.seed, context.first_column());
    } else if constexpr (requires { DropoutMath<B>::dropout(x, y, mask[0], rate, context.seed, 0, context.column_positions); }) {
      DropoutMath<B>::dropout(x, y, mask[0], rate, context.seed, 0, context.column_positions);
    } else {
      throw ConfigError("Dropout: packed sequences (Bert) are not supported on this device yet");
    }
  }
  // Backward only runs after a training forward pass, which wrote the mask (or copied when rate == 0).
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView, Scratch mask, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data == nullptr) return;
    if (rate > 0.0f) DropoutMath<B>::multiply(dy, mask[0], dx);
    else B::copy(dy, dx);
  }
};

}  // namespace strata::nn
