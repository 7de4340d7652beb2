#pragma once
// Dropout: in training, zeroes each activation with probability `rate` and scales the rest
// by 1/(1-rate); at inference it is the identity. The mask of a sample depends only on the
// step seed and the sample's position in the global batch, so any sharding draws the same mask.

#include <array>
#include <string>

#include "strata/core/backend.hpp"
#include "strata/core/error.hpp"
#include "strata/nn/layer.hpp"

namespace strata::nn {

struct Dropout {
  float rate = 0.5f;

  static constexpr int input_width = any_width;
  static constexpr int output_width(int width) { return width; }
  static constexpr std::size_t parameter_count(int) { return 0; }
  // The mask, kept from forward for backward.
  static constexpr std::array<ScratchBuffer, 1> scratch(int width, int columns) { return {{{width, columns}}}; }
  static std::string name() { return "Dropout"; }

  void initialize(float*, int, Rng&) const {
    if (!(rate >= 0.0f && rate < 1.0f))
      throw ConfigError(strata::detail::message("Dropout: rate ", rate, " is outside [0, 1); use e.g. Dropout{0.2f}"));
  }

  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch mask, ForwardContext const& context) const {
    if (context.training && rate > 0.0f) B::dropout(x, y, mask[0], rate, context.seed, context.first_sample);
    else B::copy(x, y);
  }
  // Backward only runs after a training forward pass, which wrote the mask (or copied when rate == 0).
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView, Scratch mask, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data == nullptr) return;
    if (rate > 0.0f) B::multiply(dy, mask[0], dx);
    else B::copy(dy, dx);
  }
};

}  // namespace strata::nn
