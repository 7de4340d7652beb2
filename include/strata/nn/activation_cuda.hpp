#pragma once
// The activations' math on the Cuda device: one element-wise kernel each, in the
// activations' own kernel module, on the calling replica's context. Included by
// strata/cuda.hpp.

#include <array>
#include <concepts>
#include <cstdint>

#include "strata/cuda/backend.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/nn/activation.hpp"

namespace strata::nn {

namespace detail {
inline constexpr char const activation_body[] = R"CUDA(
extern "C" __global__ void strata_relu(const float* x, float* y, i64 n) {
  GRID_LOOP(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
extern "C" __global__ void strata_relu_backward(const float* y, const float* dy, float* dx, i64 n) {
  GRID_LOOP(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
extern "C" __global__ void strata_tanh(const float* x, float* y, i64 n) {
  GRID_LOOP(i, n) y[i] = tanhf(x[i]);
}
extern "C" __global__ void strata_tanh_backward(const float* y, const float* dy, float* dx, i64 n) {
  GRID_LOOP(i, n) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}
extern "C" __global__ void strata_gelu(const float* x, float* y, i64 n) {
  GRID_LOOP(i, n) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}
extern "C" __global__ void strata_gelu_backward(const float* x, const float* dy, float* dx, i64 n) {
  GRID_LOOP(i, n) {
    float v = x[i];
    float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}
)CUDA";
inline constexpr auto activation_source = cuda::join_sources(cuda::device_prelude, activation_body);
inline constexpr std::array<char const*, 6> activation_kernel_names = {
    "strata_relu", "strata_relu_backward", "strata_tanh", "strata_tanh_backward", "strata_gelu", "strata_gelu_backward"};
}  // namespace detail

inline constexpr cuda::KernelModule activation_kernels{"activation", cuda::source_text(detail::activation_source),
                                                       detail::activation_kernel_names};

template <class B>
  requires std::same_as<B, CudaBackend>
struct ActivationMath<B> {
  static void relu(ConstMatrixView x, MatrixView y) { unary(0, x, y); }
  static void relu_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) { binary(1, y, dy, dx); }
  static void tanh(ConstMatrixView x, MatrixView y) { unary(2, x, y); }
  static void tanh_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) { binary(3, y, dy, dx); }
  static void gelu(ConstMatrixView x, MatrixView y) { unary(4, x, y); }
  static void gelu_backward(ConstMatrixView x, ConstMatrixView dy, MatrixView dx) { binary(5, x, dy, dx); }

 private:
  static void unary(std::size_t kernel, ConstMatrixView x, MatrixView y) {
    CudaBackend::ctx().launch(activation_kernels, kernel, std::int64_t(x.size()), x.data, y.data,
                              CudaBackend::count(x.size()));
  }
  static void binary(std::size_t kernel, ConstMatrixView a, ConstMatrixView b, MatrixView out) {
    CudaBackend::ctx().launch(activation_kernels, kernel, std::int64_t(a.size()), a.data, b.data, out.data,
                              CudaBackend::count(a.size()));
  }
};

}  // namespace strata::nn
