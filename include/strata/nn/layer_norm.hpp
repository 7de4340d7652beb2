#pragma once
// LayerNorm: normalises each column (one token's or sample's features) to zero mean and unit
// variance, then scales and shifts it: y = gamma * (x - mean) / sqrt(var + epsilon) + beta,
// the biased variance over the features, as Keras' LayerNormalization and PyTorch's
// nn.LayerNorm compute it. Its width is the previous layer's; gamma starts at 1, beta at 0.
//
//   Sequential<Dense<784, 256>, LayerNorm, Relu, Dense<256, 10>>
//   LayerNorm{.epsilon = 1e-12f}   // BERT's
//
// Each column's mean and 1/sigma are kept from forward for backward, in float also under
// mixed precision. The math of each device sits beside the layer: LayerNormMath<B> here
// for the CPU; strata/cuda.hpp adds the Cuda one (nn/layer_norm_cuda.hpp).

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <string>
#include <vector>

#include "strata/core/backend.hpp"
#include "strata/core/error.hpp"
#include "strata/core/tensor.hpp"
#include "strata/nn/layer.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// What LayerNorm's math is given: the parameters and the per-column statistics.
struct LayerNormViews {
  float const* gamma = nullptr;
  float const* beta = nullptr;
  MatrixView mean;  // 1 x columns
  MatrixView rstd;  // 1 x columns: 1 / sqrt(var + epsilon)
};

template <class B>
struct LayerNormMath {
  static_assert(policy::dependent_false<B>, "strata::LayerNorm: no math for this backend; include its device header");
};

template <class B>
  requires std::same_as<B, CpuBackend>
struct LayerNormMath<B> {
  static void forward(ConstMatrixView x, MatrixView y, LayerNormViews const& v, float epsilon) {
    int const n = x.rows;
    for (int j = 0; j < x.cols; ++j) {
      float const* in = x.data + std::size_t(j) * std::size_t(n);
      float* out = y.data + std::size_t(j) * std::size_t(n);
      double sum = 0.0;
      for (int i = 0; i < n; ++i) sum += in[i];
      float const mean = float(sum / n);
      double squares = 0.0;
      for (int i = 0; i < n; ++i) squares += double(in[i] - mean) * double(in[i] - mean);
      float const rstd = float(1.0 / std::sqrt(squares / n + double(epsilon)));
      for (int i = 0; i < n; ++i) out[i] = (in[i] - mean) * rstd * v.gamma[i] + v.beta[i];
      v.mean.data[j] = mean;
      v.rstd.data[j] = rstd;
    }
  }

  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma; dgamma and dbeta
  // summed over the columns in order (written, or added when `accumulate`).
  static void backward(ConstMatrixView x, ConstMatrixView dy, MatrixView dx, LayerNormViews const& v, float* dgamma,
                       float* dbeta, bool accumulate) {
    int const n = x.rows;
    if (!accumulate) {
      std::fill_n(dgamma, n, 0.0f);
      std::fill_n(dbeta, n, 0.0f);
    }
    for (int j = 0; j < x.cols; ++j) {
      float const* in = x.data + std::size_t(j) * std::size_t(n);
      float const* d = dy.data + std::size_t(j) * std::size_t(n);
      float const mean = v.mean.data[j], rstd = v.rstd.data[j];
      double g_sum = 0.0, gx_sum = 0.0;
      for (int i = 0; i < n; ++i) {
        float const xhat = (in[i] - mean) * rstd;
        float const g = d[i] * v.gamma[i];
        g_sum += g;
        gx_sum += double(g) * xhat;
        dgamma[i] += d[i] * xhat;
        dbeta[i] += d[i];
      }
      if (dx.data == nullptr) continue;
      float const g_mean = float(g_sum / n), gx_mean = float(gx_sum / n);
      float* out = dx.data + std::size_t(j) * std::size_t(n);
      for (int i = 0; i < n; ++i) {
        float const xhat = (in[i] - mean) * rstd;
        out[i] = rstd * (d[i] * v.gamma[i] - g_mean - xhat * gx_mean);
      }
    }
  }
};

struct LayerNorm {
  float epsilon = 1e-5f;  // PyTorch's default; BERT uses 1e-12

  static constexpr int input_width = any_width;
  static constexpr int output_width(int width) { return width; }
  static constexpr std::size_t parameter_count(int width) { return 2 * std::size_t(width); }
  static std::string name() { return "LayerNorm"; }
  static constexpr BackwardReads backward_reads{.input = true, .output = false};  // x and its kept statistics
  // Checkpoint names follow Keras' LayerNormalization.
  static constexpr char const* kind = "layer_norm";
  static std::vector<ParameterTensor> parameter_tensors(int width) {
    return {{"gamma", {width}, 0}, {"beta", {width}, std::size_t(width)}};
  }
  // Each column's mean and 1/sigma, kept in float for backward.
  static constexpr std::array<ScratchBuffer, 2> scratch(int, int columns) {
    return {{{1, columns, ScratchBuffer::Keep::kept_float}, {1, columns, ScratchBuffer::Keep::kept_float}}};
  }

  void initialize(float* params, int width, Rng&) const {
    if (!(epsilon > 0.0f) || !std::isfinite(epsilon))
      throw ConfigError(strata::detail::message("LayerNorm: epsilon ", epsilon,
                                                " must be a finite number > 0; use e.g. LayerNorm{.epsilon = 1e-5f}"));
    std::fill_n(params, width, 1.0f);
    std::fill_n(params + width, width, 0.0f);
  }

  template <class B>
  void forward(float const* params, ConstMatrixView x, MatrixView y, Scratch scratch, ForwardContext const&) const {
    LayerNormMath<B>::forward(x, y, views(params, x.rows, scratch), epsilon);
  }
  template <class B>
  void backward(float const* params, float* grads, ConstMatrixView x, ConstMatrixView, Scratch scratch,
                ConstMatrixView dy, MatrixView dx, bool accumulate) const {
    LayerNormMath<B>::backward(x, dy, dx, views(params, x.rows, scratch), grads, grads + x.rows, accumulate);
  }

 private:
  static LayerNormViews views(float const* params, int width, Scratch scratch) {
    return {params, params + width, scratch[0], scratch[1]};
  }
};

}  // namespace strata::nn
