#pragma once
// The losses' and Accuracy's math on the Cuda device: one thread per sample, the per-sample
// sums added by one block in a fixed order; in the deferred mode of the training step and
// the evaluator (CudaBackend::defer_sums) the sums stay on the device until collected.
// The kernels are the losses' own module. Included by strata/cuda.hpp.

#include <concepts>
#include <cstdint>

#include <array>

#include "strata/cuda/backend.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/nn/loss.hpp"
#include "strata/nn/metric.hpp"

namespace strata::nn {

namespace detail {
inline constexpr char const loss_body[] = R"CUDA(
// One thread per sample: loss[j] = log(sum exp(z - peak)) + peak - z[label], and
// dz = grad_scale * (softmax - onehot). A label that is not a class index records the
// smallest such sample in *bad (the host names it).
extern "C" __global__ void strata_softmax_xent(const float* logits, const float* labels, float* dlogits,
                                               double* losses, int* bad, int rows, int cols, float grad_scale) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += blockDim.x * gridDim.x) {
    const float* z = logits + i64(j) * rows;
    float* d = dlogits + i64(j) * rows;
    float value = labels[j];
    if (!(value >= 0.0f && value < float(rows) && value == floorf(value))) {
      atomicMin(bad, j);
      losses[j] = 0.0;
      continue;
    }
    int label = int(value);
    float peak = z[0];
    for (int i = 1; i < rows; ++i) peak = fmaxf(peak, z[i]);
    float sum = 0.0f;
    for (int i = 0; i < rows; ++i) {
      float e = expf(z[i] - peak);
      d[i] = e;
      sum += e;
    }
    losses[j] = double(logf(sum) + peak - z[label]);
    float f = grad_scale / sum;
    for (int i = 0; i < rows; ++i) d[i] *= f;
    d[label] -= grad_scale;
  }
}
// Samples whose first largest logit is at the label's position (Eigen's maxCoeff keeps the first).
extern "C" __global__ void strata_count_correct(const float* logits, const float* labels, u64* count, int rows, int cols) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += blockDim.x * gridDim.x) {
    const float* z = logits + i64(j) * rows;
    int best = 0;
    for (int i = 1; i < rows; ++i)
      if (z[i] > z[best]) best = i;
    if (float(best) == labels[j]) atomicAdd(count, 1ull);
  }
}
// d = factor * (p - t); sums[j] = sum over the column of (p - t)^2.
extern "C" __global__ void strata_squared_error(const float* p, const float* t, float* d, double* sums, int rows,
                                                int cols, float factor) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += blockDim.x * gridDim.x) {
    double s = 0.0;
    for (int i = 0; i < rows; ++i) {
      i64 k = i64(j) * rows + i;
      float diff = p[k] - t[k];
      d[k] = diff * factor;
      s += double(diff) * double(diff);
    }
    sums[j] = s;
  }
}
)CUDA";
inline constexpr auto loss_source = cuda::join_sources(cuda::device_prelude, loss_body);
inline constexpr std::array<char const*, 3> loss_kernel_names = {"strata_softmax_xent", "strata_squared_error",
                                                                 "strata_count_correct"};
}  // namespace detail

// SoftmaxCrossEntropy's, MeanSquaredError's and Accuracy's kernels.
inline constexpr cuda::KernelModule loss_kernels{"loss", cuda::source_text(detail::loss_source),
                                                 detail::loss_kernel_names};

template <class B>
  requires std::same_as<B, CudaBackend>
struct LossMath<B> {
  static double softmax_cross_entropy(ConstMatrixView logits, ConstMatrixView labels, MatrixView dlogits,
                                      float grad_scale) {
    if (logits.cols == 0) return 0.0;
    auto& c = CudaBackend::ctx();
    double* losses = c.per_sample(logits.cols);
    bool const deferred = c.deferred().on;
    if (!deferred) c.reset_flags();
    c.launch(loss_kernels, 0, logits.cols, logits.data, labels.data, dlogits.data, losses,
             &c.device_flags()->bad, logits.rows, logits.cols, grad_scale);
    c.launch_blocks(cuda::Kernel::sum_doubles, 1, static_cast<double const*>(losses), logits.cols,
                    &c.device_flags()->value);
    if (deferred) {
      c.deferred().labels = labels.data;
      c.deferred().classes = logits.rows;
      return 0.0;
    }
    auto const flags = c.read_flags();  // one wait for the sum and the first bad label
    CudaBackend::check_label(c, flags.bad, labels.data, logits.rows);
    return flags.value;
  }

  static double mean_squared_error(ConstMatrixView prediction, ConstMatrixView target, MatrixView dprediction,
                                   float grad_scale) {
    if (prediction.cols == 0) return 0.0;
    auto& c = CudaBackend::ctx();
    double* sums = c.per_sample(prediction.cols);
    float const inverse_width = 1.0f / float(prediction.rows);
    c.launch(loss_kernels, 1, prediction.cols, prediction.data, target.data, dprediction.data, sums,
             prediction.rows, prediction.cols, 2.0f * inverse_width * grad_scale);
    c.launch_blocks(cuda::Kernel::sum_doubles, 1, static_cast<double const*>(sums), prediction.cols,
                    &c.device_flags()->value);
    if (c.deferred().on) {
      c.deferred().loss_factor = double(inverse_width);
      return 0.0;
    }
    return c.read_flags().value * double(inverse_width);
  }
};

template <class B>
  requires std::same_as<B, CudaBackend>
struct AccuracyMath<B> {
  static std::int64_t count_correct(ConstMatrixView logits, ConstMatrixView labels) {
    if (logits.cols == 0) return 0;
    auto& c = CudaBackend::ctx();
    bool const deferred = c.deferred().on;
    if (!deferred) c.reset_flags();
    c.launch(loss_kernels, 2, logits.cols, logits.data, labels.data, &c.device_flags()->count, logits.rows,
             logits.cols);
    return deferred ? 0 : std::int64_t(c.read_flags().count);
  }
};

}  // namespace strata::nn
