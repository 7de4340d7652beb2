#pragma once
// Residual's math on the Cuda device: y = a + b, one kernel of its own (a KernelModule).
// Included by strata/cuda.hpp.

#include <array>
#include <concepts>

#include "strata/cuda/backend.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/nn/residual.hpp"

namespace strata::nn {

namespace detail {
inline constexpr char const residual_source[] = R"(
extern "C" __global__ void strata_residual_sum(const float* a, const float* b, float* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = a[i] + b[i];
}
)";
inline constexpr std::array<char const*, 1> residual_kernel_names = {"strata_residual_sum"};
}  // namespace detail

inline constexpr cuda::KernelModule residual_kernels{"Residual", detail::residual_source, detail::residual_kernel_names};

template <class B>
  requires std::same_as<B, CudaBackend>
struct ResidualMath<B> {
  static void sum(ConstMatrixView a, ConstMatrixView b, MatrixView y) {
    cuda::current_context().launch(residual_kernels, 0, std::int64_t(y.size()), a.data, b.data, y.data,
                                   (long long)y.size());
  }
};

}  // namespace strata::nn
