#pragma once
// Element-wise activations: Relu, Tanh, Gelu.

#include <string>

#include "strata/core/backend.hpp"
#include "strata/nn/layer.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// The activations' math on a device: the CPU's here; strata/cuda.hpp adds the Cuda one
// (nn/activation_cuda.hpp).
template <class B>
struct ActivationMath {
  static_assert(policy::dependent_false<B>, "strata: Relu, Tanh and Gelu have no math for this backend; include its device header");
};

#include "strata/core/detail/gcc_avx512_warnings_off.hpp"  // Eigen's max, exp and tanh packets below
template <>
struct ActivationMath<CpuBackend> {
  static void relu(ConstMatrixView x, MatrixView y) { strata::detail::eigen(y).array() = strata::detail::eigen(x).array().max(0.0f); }
  // dx = dy where y > 0
  static void relu_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) {
    strata::detail::eigen(dx).array() = (strata::detail::eigen(y).array() > 0.0f).select(strata::detail::eigen(dy).array(), 0.0f);
  }

  static void tanh(ConstMatrixView x, MatrixView y) { strata::detail::eigen(y).array() = strata::detail::eigen(x).array().tanh(); }
  static void tanh_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) {
    auto Y = strata::detail::eigen(y).array();
    strata::detail::eigen(dx).array() = strata::detail::eigen(dy).array() * (1.0f - Y * Y);
  }

  // Exact GELU, x * Phi(x) (Keras' default, approximate=False).
  static void gelu(ConstMatrixView x, MatrixView y) {
    float const* in = x.data;
    float* out = y.data;
    for (std::size_t i = 0, n = x.size(); i < n; ++i)
      out[i] = 0.5f * in[i] * (1.0f + std::erf(in[i] * 0.70710678118654752f));
  }
  static void gelu_backward(ConstMatrixView x, ConstMatrixView dy, MatrixView dx) {
    for (std::size_t i = 0, n = x.size(); i < n; ++i) {
      float const v = x.data[i];
      float const cdf = 0.5f * (1.0f + std::erf(v * 0.70710678118654752f));
      float const pdf = 0.39894228040143268f * std::exp(-0.5f * v * v);
      dx.data[i] = dy.data[i] * (cdf + v * pdf);
    }
  }
};
#include "strata/core/detail/gcc_avx512_warnings_on.hpp"

struct Relu : ParameterFreeLayer {
  static std::string name() { return "Relu"; }
  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    ActivationMath<B>::relu(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView y, Scratch, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data != nullptr) ActivationMath<B>::relu_backward(y, dy, dx);
  }
};

struct Tanh : ParameterFreeLayer {
  static std::string name() { return "Tanh"; }
  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    ActivationMath<B>::tanh(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView y, Scratch, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data != nullptr) ActivationMath<B>::tanh_backward(y, dy, dx);
  }
};

// Exact GELU, x * Phi(x).
struct Gelu : ParameterFreeLayer {
  static std::string name() { return "Gelu"; }
  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    ActivationMath<B>::gelu(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView x, ConstMatrixView, Scratch, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data != nullptr) ActivationMath<B>::gelu_backward(x, dy, dx);
  }
};

}  // namespace strata::nn
