#pragma once
// The losses' and Accuracy's math on the Cuda device: one thread per sample, the per-sample
// sums added by one block in a fixed order; in the deferred mode of the training step and
// the evaluator (CudaBackend::defer_sums) the sums stay on the device until collected.
// Included by strata/cuda.hpp. The kernels are strata's own (cuda/kernel_source.hpp).

#include <cstdint>

#include "strata/cuda/backend.hpp"
#include "strata/nn/loss.hpp"
#include "strata/nn/metric.hpp"

namespace strata::nn {

template <>
struct LossMath<CudaBackend> {
  static double softmax_cross_entropy(ConstMatrixView logits, ConstMatrixView labels, MatrixView dlogits,
                                      float grad_scale) {
    if (logits.cols == 0) return 0.0;
    auto& c = CudaBackend::ctx();
    double* losses = c.per_sample(logits.cols);
    bool const deferred = c.deferred().on;
    if (!deferred) c.reset_flags();
    c.launch(cuda::Kernel::softmax_cross_entropy, logits.cols, logits.data, labels.data, dlogits.data, losses,
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
    c.launch(cuda::Kernel::squared_error, prediction.cols, prediction.data, target.data, dprediction.data, sums,
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

template <>
struct AccuracyMath<CudaBackend> {
  static std::int64_t count_correct(ConstMatrixView logits, ConstMatrixView labels) {
    if (logits.cols == 0) return 0;
    auto& c = CudaBackend::ctx();
    bool const deferred = c.deferred().on;
    if (!deferred) c.reset_flags();
    c.launch(cuda::Kernel::count_correct, logits.cols, logits.data, labels.data, &c.device_flags()->count, logits.rows,
             logits.cols);
    return deferred ? 0 : std::int64_t(c.read_flags().count);
  }
};

}  // namespace strata::nn
