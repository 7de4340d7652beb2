#pragma once
// Element-wise activations: Relu, Tanh, Gelu.

#include <string>

#include "strata/core/backend.hpp"
#include "strata/nn/layer.hpp"

namespace strata::nn {

struct Relu : ParameterFreeLayer {
  static std::string name() { return "Relu"; }
  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    B::relu(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView y, Scratch, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data != nullptr) B::relu_backward(y, dy, dx);
  }
};

struct Tanh : ParameterFreeLayer {
  static std::string name() { return "Tanh"; }
  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    B::tanh(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView y, Scratch, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data != nullptr) B::tanh_backward(y, dy, dx);
  }
};

// Exact GELU, x * Phi(x).
struct Gelu : ParameterFreeLayer {
  static std::string name() { return "Gelu"; }
  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    B::gelu(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView x, ConstMatrixView, Scratch, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data != nullptr) B::gelu_backward(x, dy, dx);
  }
};

}  // namespace strata::nn
