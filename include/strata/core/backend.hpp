#pragma once
// Device backends: the math layers, losses and optimizers are written against.
//
// A backend is a type with static functions over plain views. Layers call
// `Backend::gemm(...)`, never Eigen or cuBLAS directly, so a GPU backend is an addition,
// not a rewrite. `backend_for<Device>` (strategy/backend_for.hpp) picks the backend of a device
// policy at compile time.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>

#include "strata/core/eigen.hpp"

#include "strata/core/blas.hpp"
#include "strata/core/error.hpp"
#include "strata/core/random.hpp"
#include "strata/core/tensor.hpp"

namespace strata {

enum class Transpose { no, yes };

// Whether a label stored as float is a class index in [0, classes): the one test both the
// up-front dataset check and the per-batch loss use.
inline bool is_class_index(float value, int classes) {
  return value >= 0.0f && value < float(classes) && value == std::floor(value);
}

// What a layer may ask of a backend. Every function works on column-major views whose
// columns are samples; `cols == 0` (an empty shard) is valid everywhere.
template <class B>
concept Backend = requires(ConstMatrixView a, MatrixView c, float const* v, float* out, float s) {
  B::gemm(Transpose::no, Transpose::no, s, a, a, s, c);  // c = s*op(a)*op(b) + s*c
  B::add_bias(c, v);                                     // c(:, j) += v
  B::row_sums(a, s, out);                                // out = s*out + sum_j a(:, j)
  B::relu(a, c);
  B::relu_backward(a, a, c);
};

// GCC 12's false "'__Y' may be used uninitialized" for AVX-512 code (core/eigen.hpp says
// why): Eigen's max, exp and tanh packets are inlined into the functions below, so the
// region covers them too, also for a program that included Eigen before strata.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

struct CpuBackend {
  // c = alpha * op(a) * op(b) + beta * c
  static void gemm(Transpose op_a, Transpose op_b, float alpha, ConstMatrixView a, ConstMatrixView b, float beta,
                   MatrixView c) {
    auto C = detail::eigen(c);
    int const inner = op_a == Transpose::no ? a.cols : a.rows;
    if (inner == 0 || c.size() == 0) {  // an empty sum: only the beta * c part remains
      if (beta == 0.0f) C.setZero(); else C *= beta;
      return;
    }
    // beta == 0 takes Eigen's plain product assignment, exactly what hand-written Eigen code runs.
    auto product = [&](auto const& A, auto const& B) {
      if (beta == 0.0f) {
        C.noalias() = alpha * A * B;
      } else {
        if (beta != 1.0f) C *= beta;
        C.noalias() += alpha * A * B;
      }
    };
    auto A = detail::eigen(a);
    auto B = detail::eigen(b);
    if (op_a == Transpose::no && op_b == Transpose::no) product(A, B);
    else if (op_a == Transpose::no) product(A, B.transpose());
    else if (op_b == Transpose::no) product(A.transpose(), B);
    else product(A.transpose(), B.transpose());
  }

  static void add_bias(MatrixView y, float const* bias) {
    detail::eigen(y).colwise() += Eigen::Map<Vector const>(bias, y.rows);
  }

  static void row_sums(ConstMatrixView x, float beta, float* out) {
    Eigen::Map<Vector> o(out, x.rows);
    if (beta == 0.0f) o = detail::eigen(x).rowwise().sum();
    else o = beta * o + detail::eigen(x).rowwise().sum();
  }

  static void copy(ConstMatrixView x, MatrixView y) { detail::eigen(y) = detail::eigen(x); }

  static void relu(ConstMatrixView x, MatrixView y) { detail::eigen(y).array() = detail::eigen(x).array().max(0.0f); }
  // dx = dy where y > 0
  static void relu_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) {
    detail::eigen(dx).array() = (detail::eigen(y).array() > 0.0f).select(detail::eigen(dy).array(), 0.0f);
  }

  static void tanh(ConstMatrixView x, MatrixView y) { detail::eigen(y).array() = detail::eigen(x).array().tanh(); }
  static void tanh_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) {
    auto Y = detail::eigen(y).array();
    detail::eigen(dx).array() = detail::eigen(dy).array() * (1.0f - Y * Y);
  }

  // Exact GELU, x * Phi(x) (Keras' default, approximate=False).
  static void gelu(ConstMatrixView x, MatrixView y) {
    float const* in = x.data;
    float* out = y.data;
    for (std::size_t i = 0, n = x.size(); i < n; ++i)
      out[i] = 0.5f * in[i] * (1.0f + std::erf(in[i] * 0.70710678118654752f));
  }
  static void gelu_backward(ConstMatrixView x, ConstMatrixView dy, MatrixView dx) {
    for (std::size_t i = 0, n = x.size(); i < n; ++i) {
      float const v = x.data[i];
      float const cdf = 0.5f * (1.0f + std::erf(v * 0.70710678118654752f));
      float const pdf = 0.39894228040143268f * std::exp(-0.5f * v * v);
      dx.data[i] = dy.data[i] * (cdf + v * pdf);
    }
  }

  // Inverted dropout. The mask of element (row, sample) depends only on (seed, sample, row),
  // so sharding a batch across replicas draws the same mask as one replica would.
  static void dropout(ConstMatrixView x, MatrixView y, MatrixView mask, float rate, std::uint64_t seed,
                      std::int64_t first_sample) {
    float const keep_scale = 1.0f / (1.0f - rate);
    for (int j = 0; j < x.cols; ++j) {
      std::uint64_t const column_seed = mix64(seed, std::uint64_t(first_sample + j));
      for (int i = 0; i < x.rows; ++i) {
        std::size_t const k = std::size_t(j) * std::size_t(x.rows) + std::size_t(i);
        float const m = uniform01(mix64(column_seed, std::uint64_t(i))) >= rate ? keep_scale : 0.0f;
        mask.data[k] = m;
        y.data[k] = x.data[k] * m;
      }
    }
  }
  static void multiply(ConstMatrixView a, ConstMatrixView b, MatrixView out) {
    detail::eigen(out).array() = detail::eigen(a).array() * detail::eigen(b).array();
  }

  // Softmax cross-entropy with integer labels (stored as floats, one row). Returns the sum
  // of the per-sample losses; writes grad_scale * d(sum)/d(logits).
  static double softmax_cross_entropy(ConstMatrixView logits, ConstMatrixView labels, MatrixView dlogits,
                                      float grad_scale) {
    double total = 0.0;
    for (int j = 0; j < logits.cols; ++j) {
      auto z = detail::eigen(logits).col(j);
      auto d = detail::eigen(dlogits).col(j);
      int const label = checked_label(labels.data[j], logits.rows, j);
      float const peak = z.maxCoeff();
      d.array() = (z.array() - peak).exp();
      float const sum = d.sum();
      total += double(std::log(sum) + peak - z(label));
      d *= grad_scale / sum;
      d(label) -= grad_scale;
    }
    return total;
  }

  // Number of samples whose largest logit is at the label's position.
  static std::int64_t count_correct(ConstMatrixView logits, ConstMatrixView labels) {
    std::int64_t correct = 0;
    for (int j = 0; j < logits.cols; ++j) {
      Eigen::Index best = 0;
      detail::eigen(logits).col(j).maxCoeff(&best);
      correct += (best == Eigen::Index(labels.data[j]));
    }
    return correct;
  }

  // Mean over features of the squared error, summed over samples (Keras MSE reduces the last axis by mean).
  static double mean_squared_error(ConstMatrixView prediction, ConstMatrixView target, MatrixView dprediction,
                                   float grad_scale) {
    auto diff = (detail::eigen(prediction) - detail::eigen(target)).array();
    float const inverse_width = 1.0f / float(prediction.rows);
    detail::eigen(dprediction).array() = diff * (2.0f * inverse_width * grad_scale);
    return double(diff.square().sum()) * double(inverse_width);
  }

  static int checked_label(float value, int classes, int sample) {
    if (!is_class_index(value, classes))
      throw DataError(strata::detail::message("SoftmaxCrossEntropy: label ", value, " of sample ", sample,
                                      " in this batch is not a class index in [0, ", classes, ")"));
    return int(value);
  }
};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

static_assert(Backend<CpuBackend>);

// Where a backend's workspaces keep activations: host matrices, unless the backend names its
// own buffer type (the Cuda backend's live in device memory).
template <class B>
struct backend_buffer {
  using type = Matrix;
};
template <class B>
  requires requires { typename B::Buffer; }
struct backend_buffer<B> {
  using type = typename B::Buffer;
};

}  // namespace strata
