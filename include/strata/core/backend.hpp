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
#include <cstddef>
#include <cstdint>

#include "strata/core/eigen.hpp"

#include "strata/core/blas.hpp"
#if defined(STRATA_DNNL)
#include "strata/core/dnnl.hpp"
#endif
#include "strata/core/dtype.hpp"
#include "strata/core/error.hpp"
#include "strata/core/intra_op.hpp"
#include "strata/core/product_precision.hpp"
#include "strata/core/random.hpp"
#include "strata/core/tensor.hpp"

namespace strata {

#if !defined(STRATA_DNNL)
// Without oneDNN, every product multiplies floats (core/dnnl.hpp says when they are bf16,
// and on which engine).
inline bool bf16_products_available() { return false; }
inline bool bf16_kernel_products() { return false; }
#endif

// out[i] = in[i] rounded to bf16 exactly as a bf16 product rounds its inputs: what a
// Bf16Copy (core/product_precision.hpp) holds, so that reading it changes no bit.
inline void round_to_product_bf16(bf16* out, float const* in, std::size_t n) {
#if defined(STRATA_DNNL)
  if (bf16_products_available()) {
    detail::to_bf16_avx512(out, in, n);
    return;
  }
#endif
  store<bf16>(out, in, n);
}

// rounded[i] = in[i] rounded to bf16 (kept as float, round_to<bf16>'s bits) and out[i] =
// its bf16 product copy (round_to_product_bf16 of it), in one pass: how the trainer's
// rounded weights and their copy for the products are refreshed together. `rounded` ==
// nullptr: only out is written (weights that only products read).
inline void round_with_bf16_copy(float* rounded, bf16* out, float const* in, std::size_t n) {
#if defined(STRATA_DNNL)
  if (bf16_products_available()) {
    detail::round_with_bf16_copy_avx512(rounded, out, in, n);
    return;
  }
#endif
  if (rounded == nullptr) {
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16(float(bf16(in[i])));
    return;
  }
  std::copy_n(in, n, rounded);
  round_to<bf16>(rounded, n);
  store<bf16>(out, rounded, n);
}

enum class Transpose { no, yes };

// Whether a label stored as float is a class index in [0, classes): the one test both the
// up-front dataset check and the per-batch loss use.
inline bool is_class_index(float value, int classes) {
  return value >= 0.0f && value < float(classes) && value == std::floor(value);
}

// The class index of sample `sample`'s label, or a DataError naming it: what a loss reads per batch.
inline int checked_label(float value, int classes, int sample) {
  if (!is_class_index(value, classes))
    throw DataError(strata::detail::message("SoftmaxCrossEntropy: label ", value, " of sample ", sample,
                                            " in this batch is not a class index in [0, ", classes, ")"));
  return int(value);
}

// What a layer may ask of a backend. Every function works on column-major views whose
// columns are samples; `cols == 0` (an empty shard) is valid everywhere.
template <class B>
concept Backend = requires(ConstMatrixView a, MatrixView c, float const* v, float* out, float s) {
  B::gemm(Transpose::no, Transpose::no, s, a, a, s, c);  // c = s*op(a)*op(b) + s*c
  B::add_bias(c, v);                                     // c(:, j) += v
  B::row_sums(a, s, out);                                // out = s*out + sum_j a(:, j)
  B::copy(a, c);
};

#include "strata/core/detail/gcc_avx512_warnings_off.hpp"  // Eigen's packets in the products below

struct CpuBackend {
  // A product is split over the bound intra-op team (core/intra_op.hpp) from this many
  // multiply-adds, into parts of at least min_split_columns output columns: below that, the
  // hand-off costs more than the second core gains.
  static constexpr double min_split_macs = double(1 << 21);
  static constexpr int min_split_columns = 32;

  // c = alpha * op(a) * op(b) + beta * c. A template only so that Eigen's products are
  // compiled where a program multiplies, not in every unit that includes this header.
  template <class = void>
  static void gemm(Transpose op_a, Transpose op_b, float alpha, ConstMatrixView a, ConstMatrixView b, float beta,
                   MatrixView c) {
    auto C = detail::eigen(c);
    int const inner = op_a == Transpose::no ? a.cols : a.rows;
    if (inner == 0 || c.size() == 0) {  // an empty sum: only the beta * c part remains
      if (beta == 0.0f) C.setZero(); else C *= beta;
      return;
    }
    int const parts = split_parts(c.rows, c.cols, inner);
#if defined(STRATA_DNNL)
    dnnl_gemm(op_a == Transpose::yes, op_b == Transpose::yes, alpha, a, b, beta, c, parts);
#else
    eigen_gemm(op_a, op_b, alpha, a, b, beta, c, parts);
#endif
  }

  // How many parts a product of (rows x inner) by (inner x cols) is split into on this
  // thread's intra-op team: 1 without one, or below min_split_macs.
  static int split_parts(int rows, int cols, int inner) {
    if (double(rows) * double(cols) * double(inner) < min_split_macs) return 1;
    return intra_op_parts(cols, min_split_columns);
  }

  // The element-wise operations split over the bound team where large, as products do.
  static void add_bias(MatrixView y, float const* bias) {
    run_split_columns(y.rows, y.cols, [&](int first, int count) {
      detail::eigen(y.columns(first, count)).colwise() += Eigen::Map<Vector const>(bias, y.rows);
    });
  }

  // Split by rows. Each row adds its columns from the first to the last, whatever the split
  // (Eigen's rowwise sum adds a row in an order that depends on where the row sits).
  static void row_sums(ConstMatrixView x, float beta, float* out) {
    run_split(x.rows, min_split_floats / std::max(1, x.cols), [&](int first, int count) {
      constexpr int block = 256;  // rows summed at once, in registers and L1
      for (int at = first; at < first + count; at += block) {
        int const n = std::min(block, first + count - at);
        alignas(64) float sums[block] = {};
        for (int j = 0; j < x.cols; ++j) {
          float const* __restrict column = x.data + std::size_t(j) * std::size_t(x.rows) + std::size_t(at);
          for (int i = 0; i < n; ++i) sums[i] += column[i];
        }
        float* __restrict o = out + at;
        if (beta == 0.0f) std::copy_n(sums, n, o);
        else for (int i = 0; i < n; ++i) o[i] = beta * o[i] + sums[i];
      }
    });
  }

  static void copy(ConstMatrixView x, MatrixView y) {
    run_split_columns(x.rows, x.cols, [&](int first, int count) {
      detail::eigen(y.columns(first, count)) = detail::eigen(x.columns(first, count));
    });
  }

 private:
  // Each part of a split product computes its own output columns: columns of op(b), whatever the transposes.
  template <class = void>
  static void eigen_gemm(Transpose op_a, Transpose op_b, float alpha, ConstMatrixView a, ConstMatrixView b, float beta,
                         MatrixView c, int parts) {
    auto C = detail::eigen(c);
    // beta == 0 takes Eigen's plain product assignment, exactly what hand-written Eigen code runs.
    auto product = [&](auto&& out, auto const& A, auto const& B) {
      if (beta == 0.0f) {
        out.noalias() = alpha * A * B;
      } else {
        if (beta != 1.0f) out *= beta;
        out.noalias() += alpha * A * B;
      }
    };
    auto A = detail::eigen(a);
    auto B = detail::eigen(b);
    if (parts <= 1) {
      if (op_a == Transpose::no && op_b == Transpose::no) product(C, A, B);
      else if (op_a == Transpose::no) product(C, A, B.transpose());
      else if (op_b == Transpose::no) product(C, A.transpose(), B);
      else product(C, A.transpose(), B.transpose());
      return;
    }
    run_intra_op(parts, [&](int p) {
      auto const [first, count] = split_columns(c.cols, parts, p);
      auto out = C.middleCols(first, count);
      if (op_a == Transpose::no && op_b == Transpose::no) product(out, A, B.middleCols(first, count));
      else if (op_a == Transpose::no) product(out, A, B.middleRows(first, count).transpose());
      else if (op_b == Transpose::no) product(out, A.transpose(), B.middleCols(first, count));
      else product(out, A.transpose(), B.middleRows(first, count).transpose());
    });
  }

#if defined(STRATA_DNNL)
  // oneDNN: bf16 inputs with float sums where a mixed-precision pass bound them and the CPU
  // has bf16 dot products (on strata's kernel or oneDNN's matmul), else float (core/dnnl.hpp).
  static void dnnl_gemm(bool trans_a, bool trans_b, float alpha, ConstMatrixView a, ConstMatrixView b, float beta,
                        MatrixView c, int parts) {
    bool const bf16 = bf16_products_bound && bf16_products_available();
    if (bf16 && bf16_kernel_products() && !trans_a) {  // (see kernel_bf16_gemm for the transposed ones)
      detail::kernel_bf16_gemm(trans_b, alpha, a, b, beta, c, parts);
      return;
    }
    detail::DnnlBf16Products::Inputs inputs{};  // the caller's bf16 copies, read by every part
    if (bf16) inputs = detail::DnnlBf16Products::of_this_thread().round_inputs(a, b);
    run_intra_op(parts, [&](int p) {
      auto const [first, count] = split_columns(c.cols, parts, p);
      detail::dnnl_on_calling_thread();
      if (bf16) {
        int const inner = trans_a ? a.rows : a.cols;
        detail::DnnlBf16Products::of_this_thread().gemm(trans_a, trans_b, alpha, inputs, inner, beta, c, first, count);
      } else {
        detail::float_gemm(trans_a, trans_b, alpha, a, b, beta, c, first, count);
      }
    });
  }
#endif
};

#include "strata/core/detail/gcc_avx512_warnings_on.hpp"

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
