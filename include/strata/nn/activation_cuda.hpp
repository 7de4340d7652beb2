#pragma once
// The activations' math on the Cuda device: one element-wise kernel each, on the calling
// replica's context.
// Included by strata/cuda.hpp. The kernels are strata's own (cuda/kernel_source.hpp).

#include <cstdint>

#include "strata/cuda/backend.hpp"
#include "strata/nn/activation.hpp"

namespace strata::nn {

template <>
struct ActivationMath<CudaBackend> {
  static void relu(ConstMatrixView x, MatrixView y) { CudaBackend::elementwise(cuda::Kernel::relu, x.size(), x.data, y.data, CudaBackend::count(x.size())); }
  static void relu_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) {
    CudaBackend::elementwise(cuda::Kernel::relu_backward, y.size(), y.data, dy.data, dx.data, CudaBackend::count(y.size()));
  }
  static void tanh(ConstMatrixView x, MatrixView y) { CudaBackend::elementwise(cuda::Kernel::tanh, x.size(), x.data, y.data, CudaBackend::count(x.size())); }
  static void tanh_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) {
    CudaBackend::elementwise(cuda::Kernel::tanh_backward, y.size(), y.data, dy.data, dx.data, CudaBackend::count(y.size()));
  }
  static void gelu(ConstMatrixView x, MatrixView y) { CudaBackend::elementwise(cuda::Kernel::gelu, x.size(), x.data, y.data, CudaBackend::count(x.size())); }
  static void gelu_backward(ConstMatrixView x, ConstMatrixView dy, MatrixView dx) {
    CudaBackend::elementwise(cuda::Kernel::gelu_backward, x.size(), x.data, dy.data, dx.data, CudaBackend::count(x.size()));
  }
};

}  // namespace strata::nn
