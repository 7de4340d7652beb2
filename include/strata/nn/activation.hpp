#pragma once
// Element-wise activations: Relu, Tanh, Gelu.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <string>

#include "strata/core/backend.hpp"
#include "strata/nn/layer.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// The activations' math on a device: the CPU's here; strata/cuda.hpp adds the Cuda one
// (nn/activation_cuda.hpp).
template <class B>
struct ActivationMath {
  static_assert(policy::dependent_false<B>, "strata: Relu, Tanh and Gelu have no math for this backend; include its device header");
};

#include "strata/core/detail/gcc_avx512_warnings_off.hpp"  // Eigen's max, exp and tanh packets below
template <class B>
  requires std::same_as<B, CpuBackend>
struct ActivationMath<B> {
  static void relu(ConstMatrixView x, MatrixView y) {
    by_columns(x, [&](int first, int n) { eigen(y, first, n).array() = eigen(x, first, n).array().max(0.0f); });
  }
  // dx = dy where y > 0
  static void relu_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) {
    by_columns(y, [&](int first, int n) {
      eigen(dx, first, n).array() = (eigen(y, first, n).array() > 0.0f).select(eigen(dy, first, n).array(), 0.0f);
    });
  }
  // d = d where y > 0, in place, with y in float or as a mixed pass keeps it (16 bits): reading
  // y where it is kept and writing over dy leaves two arrays to touch instead of four.
  template <class T>
  static void relu_backward_in_place(T const* y, float* d, std::size_t n) {
    run_split_floats(n, [&](std::size_t begin, std::size_t count) {
      float* const out = d + begin;
      T const* const in = y + begin;
      for (std::size_t i = 0; i < count; ++i) out[i] = float(in[i]) > 0.0f ? out[i] : 0.0f;
    });
  }

  static void tanh(ConstMatrixView x, MatrixView y) {
    by_columns(x, [&](int first, int n) { eigen(y, first, n).array() = eigen(x, first, n).array().tanh(); });
  }
  // dx = dy (1 - y^2). The pass into dx and the one in place (as relu's) share tanh_slope, so
  // they give the same bits.
  static void tanh_backward(ConstMatrixView y, ConstMatrixView dy, MatrixView dx) {
    for_ranges(y, [&](std::size_t at, std::size_t n) { tanh_slope(y.data + at, dy.data + at, dx.data + at, n); });
  }
  template <class T>
  static void tanh_backward_in_place(T const* y, float* d, std::size_t n) {
    run_split_floats(n, [&](std::size_t begin, std::size_t count) {
      tanh_slope(y + begin, d + begin, d + begin, count);
    });
  }

  // Exact GELU, x * Phi(x) (Keras' default, approximate=False), in blocks that stay in L1.
  static void gelu(ConstMatrixView x, MatrixView y) {
    for_blocks(x, [&](std::size_t at, std::size_t n) {
      Block const in = padded(x.data + at, n);
      Block cdf(in.size());
      normal_cdf(in, cdf);
      cdf *= in;
      std::copy_n(cdf.data(), n, y.data + at);
    });
  }
  // d/dx x Phi(x) = Phi(x) + x phi(x)
  static void gelu_backward(ConstMatrixView x, ConstMatrixView dy, MatrixView dx) {
    for_blocks(x, [&](std::size_t at, std::size_t n) {
      Block const in = padded(x.data + at, n);
      Block cdf(in.size()), slope(in.size());
      normal_cdf(in, cdf);
      slope = (in.square() * -0.5f).exp();
      slope = padded(dy.data + at, n) * (cdf + in * 0.39894228040143268f * slope);
      std::copy_n(slope.data(), n, dx.data + at);
    });
  }

 private:
  // f(first, count) over column ranges of v, split over the bound intra-op team where v is
  // large (core/intra_op.hpp): every value is computed alike wherever it sits.
  template <class F>
  static void by_columns(ConstMatrixView v, F const& f) {
    run_split_columns(v.rows, v.cols, f);
  }
  static Eigen::Map<Matrix const> eigen(ConstMatrixView v, int first, int n) {
    return strata::detail::eigen(v.columns(first, n));
  }
  static Eigen::Map<Matrix> eigen(MatrixView v, int first, int n) { return strata::detail::eigen(v.columns(first, n)); }

  // f(at, n) over v's floats [at, at + n), one call per column range by_columns gives.
  template <class F>
  static void for_ranges(ConstMatrixView v, F const& f) {
    by_columns(v, [&](int first, int columns) {
      f(std::size_t(first) * std::size_t(v.rows), std::size_t(columns) * std::size_t(v.rows));
    });
  }
  // dx = dy (1 - y^2) over n values, y in float or 16 bits; dx may be dy.
  template <class T>
  static void tanh_slope(T const* y, float const* dy, float* dx, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      float const v = float(y[i]);
      dx[i] = dy[i] * (1.0f - v * v);
    }
  }

  static constexpr std::size_t block = 512;
  using Block = Eigen::Array<float, Eigen::Dynamic, 1, 0, block, 1>;
  // f(at, n) over v's floats in blocks of at most `block`, within each column range by_columns gives.
  template <class F>
  static void for_blocks(ConstMatrixView v, F const& f) {
    for_ranges(v, [&](std::size_t begin, std::size_t count) {
      for (std::size_t at = begin; at < begin + count; at += block) f(at, std::min(block, begin + count - at));
    });
  }
  // n floats, then zeros up to a multiple of 16 (a whole number of packets): every value then
  // takes Eigen's packet path. Its scalar path (for a ragged head or tail) computes exp and
  // contracts multiply-adds differently, and a value's GELU must not depend on where it sits
  // in a block: replicas split a batch anywhere, and each must compute what one replica does.
  static Block padded(float const* data, std::size_t n) {
    Block out(Eigen::Index((n + 15) / 16 * 16));
    std::copy_n(data, n, out.data());
    std::fill(out.data() + n, out.data() + out.size(), 0.0f);
    return out;
  }

  // Phi(x) = (1 + erf(x / sqrt 2)) / 2 on whole registers. std::erf is scalar, and was 14%
  // of a BERT training step; this erf is the rational approximation Eigen's and XLA's float
  // erf use (within 3.3e-7 of erf; outside [-4, 4] erf is +-1 in float).
  static void normal_cdf(Block const& x, Block& cdf) {
    cdf = (x * 0.70710678118654752f).max(-4.0f).min(4.0f);
    Block const z2 = cdf.square();
    cdf *= ((((((z2 * -2.72614225801306e-10f + 2.77068142495902e-08f) * z2 - 2.10102402082508e-06f) * z2 -
               5.69250639462346e-05f) * z2 - 7.34990630326855e-04f) * z2 - 2.95459980854025e-03f) * z2 -
            1.60960333262415e-02f) /
           ((((z2 * -1.45660718464996e-05f - 2.13374055278905e-04f) * z2 - 1.68282697438203e-03f) * z2 -
             7.37332916720468e-03f) * z2 - 1.42647390514189e-02f);
    cdf = 0.5f + 0.5f * cdf;
  }
};
#include "strata/core/detail/gcc_avx512_warnings_on.hpp"

struct Relu : ParameterFreeLayer {
  static std::string name() { return "Relu"; }
  static constexpr BackwardReads backward_reads{.input = false, .output = true};  // dx = dy where y > 0
  static constexpr bool selects_values = true;  // y = max(x, 0), dx = dy or 0
  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    ActivationMath<B>::relu(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView y, Scratch, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data != nullptr) ActivationMath<B>::relu_backward(y, dy, dx);
  }
  template <class T>
  static void backward_in_place(T const* y, float* d, std::size_t n) {
    ActivationMath<CpuBackend>::relu_backward_in_place(y, d, n);
  }
};

struct Tanh : ParameterFreeLayer {
  static std::string name() { return "Tanh"; }
  static constexpr BackwardReads backward_reads{.input = false, .output = true};  // dx = dy (1 - y^2)
  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    ActivationMath<B>::tanh(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView y, Scratch, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data != nullptr) ActivationMath<B>::tanh_backward(y, dy, dx);
  }
  template <class T>
  static void backward_in_place(T const* y, float* d, std::size_t n) {
    ActivationMath<CpuBackend>::tanh_backward_in_place(y, d, n);
  }
};

// Exact GELU, x * Phi(x).
struct Gelu : ParameterFreeLayer {
  static std::string name() { return "Gelu"; }
  static constexpr BackwardReads backward_reads{.input = true, .output = false};  // its slope is a function of x
  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    ActivationMath<B>::gelu(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView x, ConstMatrixView, Scratch, ConstMatrixView dy,
                MatrixView dx, bool) const {
    if (dx.data != nullptr) ActivationMath<B>::gelu_backward(x, dy, dx);
  }
};

}  // namespace strata::nn
