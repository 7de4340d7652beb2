#pragma once
// LayerNorm's math on the Cuda device: three kernels of its own (a KernelModule), compiled
// by NVRTC like strata's others and launched on the calling replica's context. Included by
// strata/cuda.hpp; nothing else of strata names it.
//
// One thread per column computes that column's mean and 1/sigma and normalises it, summing
// in double in row order as the CPU does; the gradients of gamma and beta take one thread
// per row, adding the columns in order. Every sum has a fixed order: a run repeats bit for bit.

#include <array>
#include <cstddef>

#include "strata/cuda/backend.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/nn/layer_norm.hpp"

namespace strata::nn {

namespace detail {
inline constexpr char const layer_norm_source[] = R"(
extern "C" __global__ void strata_layer_norm_forward(const float* x, float* y, const float* gamma, const float* beta,
                                                     float* mean_out, float* rstd_out, int rows, long long cols,
                                                     float epsilon) {
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < cols; j += (long long)gridDim.x * blockDim.x) {
    const float* in = x + j * rows;
    float* out = y + j * rows;
    double sum = 0.0;
    for (int i = 0; i < rows; ++i) sum += in[i];
    float mean = (float)(sum / rows);
    double squares = 0.0;
    for (int i = 0; i < rows; ++i) squares += (double)(in[i] - mean) * (double)(in[i] - mean);
    float rstd = (float)(1.0 / sqrt(squares / rows + (double)epsilon));
    for (int i = 0; i < rows; ++i) out[i] = (in[i] - mean) * rstd * gamma[i] + beta[i];
    mean_out[j] = mean;
    rstd_out[j] = rstd;
  }
}

extern "C" __global__ void strata_layer_norm_backward_input(const float* x, const float* dy, float* dx,
                                                            const float* gamma, const float* mean_in,
                                                            const float* rstd_in, int rows, long long cols) {
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < cols; j += (long long)gridDim.x * blockDim.x) {
    const float* in = x + j * rows;
    const float* d = dy + j * rows;
    float mean = mean_in[j], rstd = rstd_in[j];
    double g_sum = 0.0, gx_sum = 0.0;
    for (int i = 0; i < rows; ++i) {
      float xhat = (in[i] - mean) * rstd;
      float g = d[i] * gamma[i];
      g_sum += g;
      gx_sum += (double)g * xhat;
    }
    float g_mean = (float)(g_sum / rows), gx_mean = (float)(gx_sum / rows);
    float* out = dx + j * rows;
    for (int i = 0; i < rows; ++i) {
      float xhat = (in[i] - mean) * rstd;
      out[i] = rstd * (d[i] * gamma[i] - g_mean - xhat * gx_mean);
    }
  }
}

extern "C" __global__ void strata_layer_norm_backward_parameters(const float* x, const float* dy, const float* mean_in,
                                                                 const float* rstd_in, float* dgamma, float* dbeta,
                                                                 int rows, long long cols, int accumulate) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows; i += (long long)gridDim.x * blockDim.x) {
    float gamma_sum = accumulate ? dgamma[i] : 0.0f, beta_sum = accumulate ? dbeta[i] : 0.0f;
    for (long long j = 0; j < cols; ++j) {
      float d = dy[j * rows + i];
      gamma_sum += d * ((x[j * rows + i] - mean_in[j]) * rstd_in[j]);
      beta_sum += d;
    }
    dgamma[i] = gamma_sum;
    dbeta[i] = beta_sum;
  }
}
)";
inline constexpr std::array<char const*, 3> layer_norm_kernel_names = {
    "strata_layer_norm_forward", "strata_layer_norm_backward_input", "strata_layer_norm_backward_parameters"};
}  // namespace detail

inline constexpr cuda::KernelModule layer_norm_kernels{"LayerNorm", detail::layer_norm_source,
                                                       detail::layer_norm_kernel_names};

template <>
struct LayerNormMath<CudaBackend> {
  static void forward(ConstMatrixView x, MatrixView y, LayerNormViews const& v, float epsilon) {
    cuda::current_context().launch(layer_norm_kernels, 0, x.cols, x.data, y.data, v.gamma, v.beta, v.mean.data,
                                   v.rstd.data, x.rows, (long long)x.cols, epsilon);
  }
  static void backward(ConstMatrixView x, ConstMatrixView dy, MatrixView dx, LayerNormViews const& v, float* dgamma,
                       float* dbeta, bool accumulate) {
    auto& c = cuda::current_context();
    c.launch(layer_norm_kernels, 2, x.rows, x.data, dy.data, static_cast<float const*>(v.mean.data),
             static_cast<float const*>(v.rstd.data), dgamma, dbeta, x.rows, (long long)x.cols, int(accumulate));
    if (dx.data != nullptr)
      c.launch(layer_norm_kernels, 1, x.cols, x.data, dy.data, dx.data, v.gamma, static_cast<float const*>(v.mean.data),
               static_cast<float const*>(v.rstd.data), x.rows, (long long)x.cols);
  }
};

}  // namespace strata::nn
