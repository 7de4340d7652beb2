#pragma once
// Residual<Block>: a skip connection around a block, y = x + Block(x), as BERT's encoder and
// every transformer use it. Block is any layer that returns the width it takes, or a
// Sequential type naming the layers of the block:
//
//   Residual<Sequential<Dense<384, 1536>, Gelu, Dense<1536, 384>>>
//
// The block's parameters live in the model's arena like any layer's; its activations are
// scratch of the Residual (the block's output is kept for the block's own backward).

#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "strata/core/backend.hpp"
#include "strata/core/tensor.hpp"
#include "strata/nn/chain.hpp"
#include "strata/nn/layer.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// The math of a skip connection on a device: y = a + b. A device adds its specialisation
// beside this one (strata/cuda.hpp adds the Cuda one).
template <class B>
struct ResidualMath {
  static_assert(policy::dependent_false<B>, "strata::Residual: no math for this backend; include its device header");
};
template <class B>
  requires std::same_as<B, CpuBackend>
struct ResidualMath<B> {
  static void sum(ConstMatrixView a, ConstMatrixView b, MatrixView y) {
    strata::detail::eigen(y) = strata::detail::eigen(a) + strata::detail::eigen(b);
  }
};

namespace detail {
// A Sequential names its block's layers; the Residual runs their Chain (no arena of its own).
template <class Block>
struct residual_block {
  using type = Block;
};
template <class Block>
  requires requires { typename Block::chain_type; }
struct residual_block<Block> {
  using type = typename Block::chain_type;
};
}  // namespace detail

template <class Block>
class Residual {
 public:
  using block_type = typename detail::residual_block<Block>::type;
  static_assert(Layer<block_type>, "strata::Residual<Block>: Block must be a layer or a Sequential of layers");
  static_assert(block_type::input_width == any_width ||
                    block_type::output_width(block_type::input_width) == block_type::input_width,
                "strata::Residual<Block>: the block must return the width it takes (the skip connection adds its "
                "input to its output); end the block with a layer back to the input width");
  static_assert(output_columns_of<block_type>(1) == 1,
                "strata::Residual<Block>: the block must keep the columns per sample it takes");

  static constexpr int input_width = block_type::input_width;
  static constexpr int output_width(int width) { return width; }
  static constexpr std::size_t parameter_count(int width) { return block_type::parameter_count(width); }
  static constexpr std::size_t trainable(int width) { return detail::trainable_count<block_type>(width); }
  static std::string name() { return "Residual<" + block_type::name() + ">"; }
  static constexpr char const* kind = "residual";
  static std::vector<ParameterTensor> parameter_tensors(int width)
    requires requires { block_type::parameter_tensors(width); }
  {
    return block_type::parameter_tensors(width);
  }

  // The block's scratch, then the block's output (kept: the block's last layer may read it).
  static constexpr std::size_t block_scratch = scratch_count<block_type>;
  static constexpr std::array<ScratchBuffer, block_scratch + 1> scratch(int width, int columns) {
    std::array<ScratchBuffer, block_scratch + 1> s{};
    auto const inner = scratch_of<block_type>(width, columns);
    for (std::size_t i = 0; i < block_scratch; ++i) s[i] = inner[i];
    s[block_scratch] = {width, columns, ScratchBuffer::Keep::kept};
    return s;
  }

  Residual() = default;
  explicit Residual(block_type block) : block_(std::move(block)) {}

  void initialize(float* params, int width, Rng& rng) const { block_.initialize(params, width, rng); }

  template <class B>
  void forward(float const* params, ConstMatrixView x, MatrixView y, Scratch scratch, ForwardContext const& context) const {
    MatrixView const block_output = scratch[block_scratch];
    block_.template forward<B>(params, x, block_output, scratch.first(block_scratch), context);
    ResidualMath<B>::sum(x, block_output, y);
  }

  // dx = dy + d(block)/dx: the gradient takes both paths.
  template <class B>
  void backward(float const* params, float* grads, ConstMatrixView x, ConstMatrixView, Scratch scratch,
                ConstMatrixView dy, MatrixView dx, bool accumulate) const {
    block_.template backward<B>(params, grads, x, scratch[block_scratch], scratch.first(block_scratch), dy, dx, accumulate);
    if (dx.data != nullptr) ResidualMath<B>::sum(dx, dy, dx);
  }

  // The block's own say (nn::scratch_in_use), and the whole of the block's output.
  void scratch_in_use(Scratch scratch, std::span<std::size_t> floats) const {
    nn::scratch_in_use(block_, scratch.first(block_scratch), floats.first(block_scratch));
    floats[block_scratch] = scratch[block_scratch].size();
  }

  [[nodiscard]] block_type const& block() const { return block_; }

 private:
  block_type block_;
};

}  // namespace strata::nn
