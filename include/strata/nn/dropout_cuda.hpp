#pragma once
// Dropout's math on the Cuda device: the CPU's counter-based hash, so the masks are the
// same bits on both.
// Included by strata/cuda.hpp. The kernels are strata's own (cuda/kernel_source.hpp).

#include <cstdint>

#include "strata/cuda/backend.hpp"
#include "strata/nn/dropout.hpp"

namespace strata::nn {

template <>
struct DropoutMath<CudaBackend> {
  static void dropout(ConstMatrixView x, MatrixView y, MatrixView mask, float rate, std::uint64_t seed,
                      std::int64_t first_column) {
    CudaBackend::elementwise(cuda::Kernel::dropout, x.size(), x.data, y.data, mask.data, x.rows, CudaBackend::count(x.size()), rate,
                (unsigned long long)seed, (long long)first_column);
  }
  static void multiply(ConstMatrixView a, ConstMatrixView b, MatrixView out) {
    CudaBackend::elementwise(cuda::Kernel::multiply, a.size(), a.data, b.data, out.data, CudaBackend::count(a.size()));
  }
};

}  // namespace strata::nn
