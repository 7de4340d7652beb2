#pragma once
// LayerNorm's math on the Cuda device: three kernels of its own (a KernelModule), compiled
// by NVRTC like strata's others and launched on the calling replica's context. Included by
// strata/cuda.hpp; nothing else of strata names it.
//
// A column (one token's features) is normalised by one warp: its lanes read the column's
// rows in 32-float strides (coalesced), sum in double, and add their 32 partial sums in a
// fixed butterfly, so every lane holds the same sums. The gradients of gamma and beta take a
// block per 32 rows: each warp adds every eighth column in order, then one thread per row
// adds the 8 warps' sums in order. Every sum has a fixed order: a run repeats bit for bit.
// (One thread per column, and per row, used 8 and 2 of an H200's 132 multiprocessors and
// made LayerNorm half of BERT's training step.) tests/test_kernels_on_host.cpp runs this
// text on the CPU, with a thread per device thread, against LayerNormMath<CpuBackend>.

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>

#include "strata/cuda/backend.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/nn/layer_norm.hpp"

namespace strata::nn {

namespace detail {
inline constexpr char const layer_norm_body[] = R"CUDA(
extern "C" __global__ void strata_layer_norm_forward(const float* x, float* y, const float* gamma, const float* beta,
                                                     float* mean_out, float* rstd_out, int rows, long long cols,
                                                     float epsilon) {
  const int lane = threadIdx.x & 31;
  WARP_LOOP(j, cols) {
    const float* in = x + j * rows;
    float* out = y + j * rows;
    double sum = 0.0;
    for (int i = lane; i < rows; i += 32) sum += in[i];
    float mean = (float)(warp_sum(sum) / rows);
    double squares = 0.0;
    for (int i = lane; i < rows; i += 32) squares += (double)(in[i] - mean) * (double)(in[i] - mean);
    float rstd = (float)(1.0 / sqrt(warp_sum(squares) / rows + (double)epsilon));
    for (int i = lane; i < rows; i += 32) out[i] = (in[i] - mean) * rstd * gamma[i] + beta[i];
    if (lane == 0) {
      mean_out[j] = mean;
      rstd_out[j] = rstd;
    }
  }
}

extern "C" __global__ void strata_layer_norm_backward_input(const float* x, const float* dy, float* dx,
                                                            const float* gamma, const float* mean_in,
                                                            const float* rstd_in, int rows, long long cols) {
  const int lane = threadIdx.x & 31;
  WARP_LOOP(j, cols) {
    const float* in = x + j * rows;
    const float* d = dy + j * rows;
    float mean = mean_in[j], rstd = rstd_in[j];
    double g_sum = 0.0, gx_sum = 0.0;
    for (int i = lane; i < rows; i += 32) {
      float xhat = (in[i] - mean) * rstd;
      float g = d[i] * gamma[i];
      g_sum += g;
      gx_sum += (double)g * xhat;
    }
    float g_mean = (float)(warp_sum(g_sum) / rows), gx_mean = (float)(warp_sum(gx_sum) / rows);
    float* out = dx + j * rows;
    for (int i = lane; i < rows; i += 32) {
      float xhat = (in[i] - mean) * rstd;
      out[i] = rstd * (d[i] * gamma[i] - g_mean - xhat * gx_mean);
    }
  }
}

// Block b: rows 32b..32b+31 (a lane per row, so a warp reads 128 contiguous bytes of a
// column); warp w of the block's 8 adds columns w, w + 8, ... Launched with one block per
// 32 rows, 256 threads each.
extern "C" __global__ void strata_layer_norm_backward_parameters(const float* x, const float* dy, const float* mean_in,
                                                                 const float* rstd_in, float* dgamma, float* dbeta,
                                                                 int rows, long long cols, int accumulate) {
  __shared__ float gamma_part[8][32], beta_part[8][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int i = blockIdx.x * 32 + lane;
  float gamma_sum = 0.0f, beta_sum = 0.0f;
  if (i < rows) {
    for (long long j = warp; j < cols; j += 8) {
      float d = dy[j * rows + i];
      gamma_sum += d * ((x[j * rows + i] - mean_in[j]) * rstd_in[j]);
      beta_sum += d;
    }
  }
  gamma_part[warp][lane] = gamma_sum;
  beta_part[warp][lane] = beta_sum;
  __syncthreads();
  if (warp == 0 && i < rows) {
    float g = gamma_part[0][lane], b = beta_part[0][lane];
    for (int w = 1; w < 8; ++w) {
      g += gamma_part[w][lane];
      b += beta_part[w][lane];
    }
    dgamma[i] = accumulate ? dgamma[i] + g : g;
    dbeta[i] = accumulate ? dbeta[i] + b : b;
  }
}
)CUDA";
inline constexpr auto layer_norm_source = cuda::join_sources(cuda::device_prelude, cuda::warp_body, layer_norm_body);
inline constexpr std::array<char const*, 3> layer_norm_kernel_names = {
    "strata_layer_norm_forward", "strata_layer_norm_backward_input", "strata_layer_norm_backward_parameters"};
}  // namespace detail

inline constexpr cuda::KernelModule layer_norm_kernels{"LayerNorm", cuda::source_text(detail::layer_norm_source),
                                                       detail::layer_norm_kernel_names};

template <class B>
  requires std::same_as<B, CudaBackend>
struct LayerNormMath<B> {
  static void forward(ConstMatrixView x, MatrixView y, LayerNormViews const& v, float epsilon) {
    cuda::current_context().launch(layer_norm_kernels, 0, warp_per_column(x), x.data, y.data, v.gamma, v.beta,
                                   v.mean.data, v.rstd.data, x.rows, (long long)x.cols, epsilon);
  }
  static void backward(ConstMatrixView x, ConstMatrixView dy, MatrixView dx, LayerNormViews const& v, float* dgamma,
                       float* dbeta, bool accumulate) {
    static_assert(cuda::block_threads == 256, "strata_layer_norm_backward_parameters adds 8 warps' sums");
    auto& c = cuda::current_context();
    auto const* mean = static_cast<float const*>(v.mean.data);
    auto const* rstd = static_cast<float const*>(v.rstd.data);
    if (x.rows > 0)
      c.launch_blocks(layer_norm_kernels, 2, (x.rows + 31) / 32, x.data, dy.data, mean, rstd, dgamma, dbeta, x.rows,
                      (long long)x.cols, int(accumulate));
    if (dx.data != nullptr)
      c.launch(layer_norm_kernels, 1, warp_per_column(x), x.data, dy.data, dx.data, v.gamma, mean, rstd, x.rows,
               (long long)x.cols);
  }

 private:
  static std::int64_t warp_per_column(ConstMatrixView x) { return std::int64_t(x.cols) * cuda::warp_threads; }
};

}  // namespace strata::nn
