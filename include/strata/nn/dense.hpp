#pragma once
// Dense<In, Out>: y = W x + b, with W an Out x In column-major block of the arena followed by b.

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "strata/core/backend.hpp"
#include "strata/nn/init.hpp"
#include "strata/nn/layer.hpp"

namespace strata::nn {

template <int In, int Out, class Init = GlorotUniform>
struct Dense {
  static_assert(In >= 1, "strata::Dense<In, Out>: In must be at least 1");
  static_assert(Out >= 1, "strata::Dense<In, Out>: Out must be at least 1");

  static constexpr int input_width = In;
  static constexpr int output_width(int) { return Out; }
  static constexpr std::size_t parameter_count(int) { return std::size_t(In) * Out + Out; }
  static std::string name() { return "Dense<" + std::to_string(In) + ", " + std::to_string(Out) + ">"; }
  // Checkpoint names follow Keras: the kernel is (In, Out) row-major, which is exactly the
  // arena's column-major Out x In block, so it is written and read without a transpose.
  static constexpr char const* kind = "dense";
  static constexpr BackwardReads backward_reads{.input = true, .output = false};  // dW = dy x^T
  static std::vector<ParameterTensor> parameter_tensors(int) {
    using enum ParameterTensor::TransposedReads;
    return {{"kernel", {In, Out}, 0, /*read_by_products_only=*/true, for_input_gradient},
            {"bias", {Out}, std::size_t(In) * Out}};
  }

  void initialize(float* params, int, Rng& rng) const {
    Init::fill(params, std::size_t(In) * Out, In, Out, rng);
    std::fill_n(params + std::size_t(In) * Out, Out, 0.0f);
  }

  template <Backend B>
  void forward(float const* params, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    B::gemm(Transpose::no, Transpose::no, 1.0f, weights(params), x, 0.0f, y);
    B::add_bias(y, params + std::size_t(In) * Out);
  }

  template <Backend B>
  void backward(float const* params, float* grads, ConstMatrixView x, ConstMatrixView, Scratch,
                ConstMatrixView dy, MatrixView dx, bool accumulate) const {
    float const beta = accumulate ? 1.0f : 0.0f;
    B::gemm(Transpose::no, Transpose::yes, 1.0f, dy, x, beta, MatrixView{grads, Out, In});
    B::row_sums(dy, beta, grads + std::size_t(In) * Out);
    if (dx.data != nullptr) B::gemm(Transpose::yes, Transpose::no, 1.0f, weights(params), dy, 0.0f, dx);
  }

 private:
  static ConstMatrixView weights(float const* params) { return {params, Out, In}; }
};

}  // namespace strata::nn
