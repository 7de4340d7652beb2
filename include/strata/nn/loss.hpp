#pragma once
// Losses. A loss returns the SUM of per-sample losses over a shard and writes
// grad_scale * d(sum)/d(output); the trainer passes grad_scale = 1 and divides by the
// global sample count when it reduces, so a sharded batch gives exactly the gradient of
// the global mean however the samples were split.

#include <cmath>
#include <concepts>
#include <cstdint>

#include "strata/core/backend.hpp"
#include "strata/core/error.hpp"
#include "strata/core/tensor.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// The losses' math on a device: the CPU's here; strata/cuda.hpp adds the Cuda one
// (nn/loss_cuda.hpp).
template <class B>
struct LossMath {
  static_assert(policy::dependent_false<B>, "strata: the losses have no math for this backend; include its device header");
};

#include "strata/core/detail/gcc_avx512_warnings_off.hpp"  // Eigen's max, exp and tanh packets below
template <class B>
  requires std::same_as<B, CpuBackend>
struct LossMath<B> {
  // Softmax cross-entropy with integer labels (stored as floats, one row). Returns the sum
  // of the per-sample losses; writes grad_scale * d(sum)/d(logits).
  static double softmax_cross_entropy(ConstMatrixView logits, ConstMatrixView labels, MatrixView dlogits,
                                      float grad_scale) {
    double total = 0.0;
    for (int j = 0; j < logits.cols; ++j) {
      auto z = strata::detail::eigen(logits).col(j);
      auto d = strata::detail::eigen(dlogits).col(j);
      int const label = strata::checked_label(labels.data[j], logits.rows, j);
      float const peak = z.maxCoeff();
      d.array() = (z.array() - peak).exp();
      float const sum = d.sum();
      total += double(std::log(sum) + peak - z(label));
      d *= grad_scale / sum;
      d(label) -= grad_scale;
    }
    return total;
  }

  // Mean over features of the squared error, summed over samples (Keras MSE reduces the last axis by mean).
  static double mean_squared_error(ConstMatrixView prediction, ConstMatrixView target, MatrixView dprediction,
                                   float grad_scale) {
    auto diff = (strata::detail::eigen(prediction) - strata::detail::eigen(target)).array();
    float const inverse_width = 1.0f / float(prediction.rows);
    strata::detail::eigen(dprediction).array() = diff * (2.0f * inverse_width * grad_scale);
    return double(diff.square().sum()) * double(inverse_width);
  }
};
#include "strata/core/detail/gcc_avx512_warnings_on.hpp"

// Requires: forward_backward<B>(output, targets, d_output, grad_scale) -> sum of losses;
// validate(targets, output_width) throws DataError for targets the loss cannot take;
// target_width(output_width) is the number of target rows per sample;
// reports_accuracy says whether Accuracy is meaningful (classification).
template <class L>
concept Loss = requires(L const& loss, ConstMatrixView out, ConstMatrixView targets, MatrixView d, float s) {
  { loss.template forward_backward<CpuBackend>(out, targets, d, s) } -> std::convertible_to<double>;
  loss.validate(targets, 1);
  { L::target_width(1) } -> std::convertible_to<int>;
  { L::reports_accuracy } -> std::convertible_to<bool>;
};

// Softmax followed by cross-entropy against integer class labels (one target row: the class index).
struct SoftmaxCrossEntropy {
  static constexpr bool reports_accuracy = true;
  static constexpr int target_width(int) { return 1; }

  template <Backend B>
  double forward_backward(ConstMatrixView logits, ConstMatrixView labels, MatrixView dlogits, float grad_scale) const {
    return LossMath<B>::softmax_cross_entropy(logits, labels, dlogits, grad_scale);
  }

  // Every label must be an integer in [0, classes).
  static void validate(ConstMatrixView labels, int classes) {
    if (labels.rows != 1)
      throw ShapeError(strata::detail::message("SoftmaxCrossEntropy: targets have ", labels.rows,
                                               " rows per sample; give one integer class label per sample"));
    for (std::size_t i = 0; i < labels.size(); ++i) {
      float const v = labels.data[i];
      if (!is_class_index(v, classes))
        throw DataError(strata::detail::message("SoftmaxCrossEntropy: label ", v, " of sample ", i,
                                                " is not a class index in [0, ", classes,
                                                "); the model's last layer has ", classes, " outputs"));
    }
  }
};

// Mean over features of the squared error (Keras' MeanSquaredError), one target per output.
struct MeanSquaredError {
  static constexpr bool reports_accuracy = false;
  static constexpr int target_width(int output_width) { return output_width; }

  template <Backend B>
  double forward_backward(ConstMatrixView prediction, ConstMatrixView target, MatrixView dprediction,
                          float grad_scale) const {
    return LossMath<B>::mean_squared_error(prediction, target, dprediction, grad_scale);
  }

  static void validate(ConstMatrixView targets, int width) {
    if (targets.rows != width)
      throw ShapeError(strata::detail::message("MeanSquaredError: targets have ", targets.rows,
                                               " rows per sample, the model outputs ", width));
    for (std::size_t i = 0; i < targets.size(); ++i)
      if (!std::isfinite(targets.data[i]))
        throw DataError(strata::detail::message("MeanSquaredError: target ", targets.data[i], " of sample ",
                                                i / std::size_t(width), " is not finite"));
  }
};

static_assert(Loss<SoftmaxCrossEntropy> && Loss<MeanSquaredError>);

}  // namespace strata::nn
