#pragma once
// Dropout's math on the Cuda device, in Dropout's own kernel module: the CPU's
// counter-based hash (the device prelude's mix64 and uniform01), so the masks are the same
// bits on both. Included by strata/cuda.hpp.

#include <array>
#include <concepts>
#include <cstdint>

#include "strata/cuda/backend.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/nn/dropout.hpp"

namespace strata::nn {

namespace detail {
inline constexpr char const dropout_body[] = R"CUDA(
// Inverted dropout; the mask of (row, sample) depends only on (seed, first_sample + column, row).
extern "C" __global__ void strata_dropout(const float* x, float* y, float* mask, int rows, i64 n, float rate,
                                          u64 seed, i64 first_sample) {
  float keep_scale = 1.0f / (1.0f - rate);
  GRID_LOOP(k, n) {
    i64 j = k / rows;
    i64 i = k - j * rows;
    u64 column_seed = mix64(seed, u64(first_sample + j));
    float m = uniform01(mix64(column_seed, u64(i))) >= rate ? keep_scale : 0.0f;
    mask[k] = m;
    y[k] = x[k] * m;
  }
}
extern "C" __global__ void strata_multiply(const float* a, const float* b, float* out, i64 n) {
  GRID_LOOP(i, n) out[i] = a[i] * b[i];
}
)CUDA";
inline constexpr auto dropout_source = cuda::join_sources(cuda::device_prelude, dropout_body);
inline constexpr std::array<char const*, 2> dropout_kernel_names = {"strata_dropout", "strata_multiply"};
}  // namespace detail

inline constexpr cuda::KernelModule dropout_kernels{"Dropout", cuda::source_text(detail::dropout_source),
                                                    detail::dropout_kernel_names};

template <class B>
  requires std::same_as<B, CudaBackend>
struct DropoutMath<B> {
  static void dropout(ConstMatrixView x, MatrixView y, MatrixView mask, float rate, std::uint64_t seed,
                      std::int64_t first_column) {
    CudaBackend::ctx().launch(dropout_kernels, 0, std::int64_t(x.size()), x.data, y.data, mask.data, x.rows,
                              CudaBackend::count(x.size()), rate, (unsigned long long)seed, (long long)first_column);
  }
  static void multiply(ConstMatrixView a, ConstMatrixView b, MatrixView out) {
    CudaBackend::ctx().launch(dropout_kernels, 1, std::int64_t(a.size()), a.data, b.data, out.data,
                              CudaBackend::count(a.size()));
  }
};

}  // namespace strata::nn
