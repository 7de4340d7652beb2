#pragma once
// SelfAttention<Hidden, Heads>: multi-head scaled dot-product self-attention over the tokens
// of each sample, as BERT's attention block computes it (before its output dropout):
//
//   Q = Wq x + bq,  K = Wk x + bk,  V = Wv x + bv                     (Hidden x tokens)
//   per sample and head h (d = Hidden / Heads rows of each):
//     P_h = softmax over the sample's keys of (K_h^T Q_h / sqrt(d))
//     C_h = V_h dropout(P_h)
//   y = Wo C + bo
//
// A sample's tokens are its columns: `length` of them each (columns per sample), or, when
// the model packs its sequences (ForwardContext::sequence_lengths: Bert drops the padding),
// each sample's own number, one sample after another. Attention then runs over exactly the
// real tokens, which is what a padding mask computes, without the padding's work. Dropout on
// the probabilities follows each probability's place in the global batch, so sharding and
// packing draw the same mask. On Cuda (nn/attention_cuda.hpp) Bert does not pack: every
// sample keeps `length` columns and the lengths mask the padding's keys instead.
//
// The four projections are Dense-like blocks (kernel (In, Out) row-major, then bias).

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "strata/core/backend.hpp"
#include "strata/core/error.hpp"
#include "strata/core/tensor.hpp"
#include "strata/nn/dropout.hpp"
#include "strata/nn/init.hpp"
#include "strata/nn/layer.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// What attention's core is given: the projections (Hidden x tokens each), the kept
// probabilities and dropout mask (one n x n block per sample of n tokens and head, one after
// another), and the geometry (`length`: the largest number of tokens of a sample).
struct AttentionViews {
  MatrixView q, k, v, context;
  MatrixView probabilities, dropout_mask;
  MatrixView work;  // at least length x length floats, for one block at a time
  int heads = 1, length = 1;
};

template <class B>
struct AttentionMath {
  static_assert(policy::dependent_false<B>, "strata::SelfAttention: no math for this backend; include its device header (strata/cuda.hpp for Cuda)");
};

template <class B>
  requires std::same_as<B, CpuBackend>
struct AttentionMath<B> {
  using Strided = Eigen::Map<Matrix, 0, Eigen::OuterStride<>>;

  // Head h of the `length` tokens starting at column `first` of a Hidden x tokens matrix:
  // d x length, leading dimension Hidden.
  static Strided head(MatrixView m, std::size_t first, int h, int d, int length) {
    return {m.data + first * std::size_t(m.rows) + std::size_t(h) * std::size_t(d), d, length, Eigen::OuterStride<>(m.rows)};
  }

  // The samples' lengths into `kept` (what backward reads): the packed ones given, or
  // `length` for every sample.
  static void keep_lengths(float const* given, MatrixView kept, int length) {
    if (given) std::copy_n(given, kept.cols, kept.data);
    else std::fill_n(kept.data, kept.cols, float(length));
  }

  // Calls f(sample, first column, tokens, first float of its probability blocks) for each
  // sample: its tokens are `lengths[s]` columns (packed) or max_length each.
  template <class F>
  static void for_each_sample(int samples, float const* lengths, int max_length, int heads, F&& f) {
    std::size_t column = 0, block = 0;
    for (int s = 0; s < samples; ++s) {
      int const n = lengths ? int(lengths[s]) : max_length;
      f(s, column, n, block);
      column += std::size_t(n);
      block += std::size_t(heads) * std::size_t(n) * std::size_t(n);
    }
  }

  static void forward(AttentionViews const& a, float const* lengths, int samples, float dropout, bool training,
                      std::uint64_t seed, std::int64_t first_sample) {
    int const d = a.q.rows / a.heads, L = a.length;
    float const scale = 1.0f / std::sqrt(float(d));
    bool const drop = training && dropout > 0.0f;
    for_each_sample(samples, lengths, L, a.heads, [&](int s, std::size_t first, int n, std::size_t block) {
      for (int h = 0; h < a.heads; ++h) {
        std::size_t const at = block + std::size_t(h) * std::size_t(n) * std::size_t(n);
        Eigen::Map<Matrix> P(a.probabilities.data + at, n, n);  // keys x queries
        P.noalias() = head(a.k, first, h, d, n).transpose() * head(a.q, first, h, d, n);
        for (int j = 0; j < n; ++j) {  // softmax over the keys of query j
          float* col = P.data() + std::size_t(j) * std::size_t(n);
          float top = -std::numeric_limits<float>::infinity();
          for (int i = 0; i < n; ++i) top = std::max(top, col[i] * scale);
          float sum = 0.0f;
          for (int i = 0; i < n; ++i) sum += (col[i] = std::exp(col[i] * scale - top));
          float const inverse = 1.0f / sum;
          for (int i = 0; i < n; ++i) col[i] *= inverse;
        }
        auto C = head(a.context, first, h, d, n);
        if (drop) {  // the dropped probabilities go through `work`; the mask is kept for backward
          // Query j of head h of sample s is "column" ((sample * heads + h) * L + j) of the
          // mask, wherever the sample sits in the packing.
          std::int64_t const first_column = ((first_sample + s) * a.heads + h) * std::int64_t(L);
          DropoutMath<CpuBackend>::dropout(ConstMatrixView{P.data(), n, n}, MatrixView{a.work.data, n, n},
                                           MatrixView{a.dropout_mask.data + at, n, n}, dropout, seed, first_column);
          C.noalias() = head(a.v, first, h, d, n) * Eigen::Map<Matrix const>(a.work.data, n, n);
        } else {
          C.noalias() = head(a.v, first, h, d, n) * P;
        }
      }
    });
  }

  // From dC (Hidden x tokens) to dQ, dK, dV.
  static void backward(AttentionViews const& a, float const* lengths, int samples, ConstMatrixView d_context,
                       MatrixView dq, MatrixView dk, MatrixView dv, bool dropped) {
    int const d = a.q.rows / a.heads, L = a.length;
    float const scale = 1.0f / std::sqrt(float(d));
    MatrixView const dc{const_cast<float*>(d_context.data), d_context.rows, d_context.cols};
    for_each_sample(samples, lengths, L, a.heads, [&](int, std::size_t first, int n, std::size_t block) {
      Eigen::Map<Matrix> W(a.work.data, n, n);
      for (int h = 0; h < a.heads; ++h) {
        std::size_t const at = block + std::size_t(h) * std::size_t(n) * std::size_t(n);
        Eigen::Map<Matrix const> P(a.probabilities.data + at, n, n);
        auto dC = head(dc, first, h, d, n);
        if (dropped) {
          Eigen::Map<Matrix const> mask(a.dropout_mask.data + at, n, n);
          W = P.cwiseProduct(mask);  // the probabilities as forward used them
          head(dv, first, h, d, n).noalias() = dC * W.transpose();
          W.noalias() = head(a.v, first, h, d, n).transpose() * dC;  // d(dropped P)
          W.array() *= mask.array();
        } else {
          head(dv, first, h, d, n).noalias() = dC * P.transpose();
          W.noalias() = head(a.v, first, h, d, n).transpose() * dC;
        }
        for (int j = 0; j < n; ++j) {  // softmax backward, per query column, then the 1/sqrt(d)
          float const* p = P.data() + std::size_t(j) * std::size_t(n);
          float* g = W.data() + std::size_t(j) * std::size_t(n);
          float dot = 0.0f;
          for (int i = 0; i < n; ++i) dot += p[i] * g[i];
          for (int i = 0; i < n; ++i) g[i] = p[i] * (g[i] - dot) * scale;
        }
        head(dq, first, h, d, n).noalias() = head(a.k, first, h, d, n) * W;
        head(dk, first, h, d, n).noalias() = head(a.q, first, h, d, n) * W.transpose();
      }
    });
  }
};

template <int Hidden, int Heads, class Init = GlorotUniform>
struct SelfAttention {
  static_assert(Hidden >= 1 && Heads >= 1, "strata::SelfAttention<Hidden, Heads>: both must be at least 1");
  static_assert(Hidden % Heads == 0, "strata::SelfAttention<Hidden, Heads>: Hidden must be a multiple of Heads");
  float dropout = 0.1f;  // on the attention probabilities; BERT's attention_probs_dropout_prob

  static constexpr int head_size = Hidden / Heads;
  static constexpr std::size_t projection_floats = std::size_t(Hidden) * Hidden + Hidden;
  static constexpr int input_width = Hidden;
  static constexpr int output_width(int) { return Hidden; }
  static constexpr std::size_t parameter_count(int) { return 4 * projection_floats; }
  static std::string name() { return "SelfAttention<" + std::to_string(Hidden) + ", " + std::to_string(Heads) + ">"; }
  static constexpr char const* kind = "attention";
  static std::vector<ParameterTensor> parameter_tensors(int) {
    std::vector<ParameterTensor> out;
    char const* names[] = {"query", "key", "value", "output"};
    for (std::size_t p = 0; p < 4; ++p) {
      out.push_back({std::string(names[p]) + "/kernel", {Hidden, Hidden}, p * projection_floats,
                     /*read_by_products_only=*/true});
      out.push_back({std::string(names[p]) + "/bias", {Hidden}, p * projection_floats + std::size_t(Hidden) * Hidden});
    }
    return out;
  }
  // Kept: Q, K, V, the context C, the probabilities and their dropout mask (a length x
  // length block per sample and head), each sample's length. Temporary: dQ, dK, dV, dC and
  // one length x length block. `columns` (a sample's columns) is the (largest) length.
  enum : std::size_t { q_, k_, v_, context_, probabilities_, mask_, lengths_, dq_, dk_, dv_, dcontext_, work_, count_ };
  static constexpr std::array<ScratchBuffer, count_> scratch(int, int columns) {
    using K = ScratchBuffer::Keep;
    ScratchBuffer const hidden{Hidden, columns, K::kept}, temporary{Hidden, columns, K::temporary};
    ScratchBuffer const probabilities{columns, columns * Heads, K::kept};
    return {{hidden, hidden, hidden, hidden, probabilities, probabilities, {1, 1, K::kept_float}, temporary, temporary,
             temporary, temporary, {columns, columns, K::temporary}}};
  }

  void initialize(float* params, int, Rng& rng) const {
    if (!(dropout >= 0.0f && dropout < 1.0f))
      throw ConfigError(strata::detail::message("SelfAttention: dropout ", dropout, " is outside [0, 1)"));
    for (std::size_t p = 0; p < 4; ++p) {
      Init::fill(params + p * projection_floats, std::size_t(Hidden) * Hidden, Hidden, Hidden, rng);
      std::fill_n(params + p * projection_floats + std::size_t(Hidden) * Hidden, Hidden, 0.0f);
    }
  }

  template <class B>
  void forward(float const* params, ConstMatrixView x, MatrixView y, Scratch scratch, ForwardContext const& context) const {
    AttentionViews const a = views(scratch);
    // Bert's sequence lengths are kept for backward; otherwise every sample has `length`.
    int const samples = context.sequence_lengths ? scratch[lengths_].cols : x.cols / a.length;
    AttentionMath<B>::keep_lengths(context.sequence_lengths, scratch[lengths_], a.length);
    float const* lengths = context.sequence_lengths ? scratch[lengths_].data : nullptr;
    for (std::size_t p = 0; p < 3; ++p) project<B>(params, p, x, scratch[q_ + p]);
    AttentionMath<B>::forward(a, lengths, samples, dropout, context.training, context.seed, context.first_sample);
    project<B>(params, 3, a.context, y);
  }

  template <class B>
  void backward(float const* params, float* grads, ConstMatrixView x, ConstMatrixView, Scratch scratch, ConstMatrixView dy,
                MatrixView dx, bool accumulate) const {
    AttentionViews const a = views(scratch);
    float const beta = accumulate ? 1.0f : 0.0f;
    MatrixView const dc = scratch[dcontext_];
    project_backward<B>(params, grads, 3, a.context, dy, dc, beta);
    // Training with dropout wrote the mask; otherwise (rate 0) the probabilities went in as they were.
    int const samples = scratch[lengths_].cols;
    AttentionMath<B>::backward(a, scratch[lengths_].data, samples, dc, scratch[dq_], scratch[dk_], scratch[dv_],
                               dropout > 0.0f);
    for (std::size_t p = 0; p < 3; ++p) {
      project_backward<B>(params, grads, p, x, scratch[dq_ + p], MatrixView{}, beta);
      if (dx.data != nullptr)
        B::gemm(Transpose::yes, Transpose::no, 1.0f, weights(params, p), scratch[dq_ + p], p == 0 ? 0.0f : 1.0f, dx);
    }
  }

  // The probabilities and their dropout mask fill n x n floats per head of a sample of n
  // tokens, one block after another from the start (the lengths kept by forward say n).
  void scratch_in_use(Scratch scratch, std::span<std::size_t> floats) const {
    for (std::size_t k = 0; k < scratch.size(); ++k) floats[k] = scratch[k].size();
    MatrixView const lengths = scratch[lengths_];
    std::size_t blocks = 0;
    for (int s = 0; s < lengths.cols; ++s) blocks += std::size_t(lengths.data[s]) * std::size_t(lengths.data[s]);
    for (std::size_t k : {std::size_t(probabilities_), std::size_t(mask_)})
      floats[k] = std::min(floats[k], std::size_t(Heads) * blocks);
  }

 private:
  static AttentionViews views(Scratch scratch) {
    return {scratch[q_], scratch[k_], scratch[v_], scratch[context_], scratch[probabilities_], scratch[mask_],
            scratch[work_], Heads, scratch[probabilities_].rows};
  }
  static ConstMatrixView weights(float const* params, std::size_t p) {
    return {params + p * projection_floats, Hidden, Hidden};
  }
  template <class B>
  static void project(float const* params, std::size_t p, ConstMatrixView x, MatrixView y) {
    B::gemm(Transpose::no, Transpose::no, 1.0f, weights(params, p), x, 0.0f, y);
    B::add_bias(y, params + p * projection_floats + std::size_t(Hidden) * Hidden);
  }
  // d(kernel) and d(bias) of projection p from its input x and output gradient dy; dx when asked.
  template <class B>
  static void project_backward(float const* params, float* grads, std::size_t p, ConstMatrixView x, ConstMatrixView dy,
                               MatrixView dx, float beta) {
    float* g = grads + p * projection_floats;
    B::gemm(Transpose::no, Transpose::yes, 1.0f, dy, x, beta, MatrixView{g, Hidden, Hidden});
    B::row_sums(dy, beta, g + std::size_t(Hidden) * Hidden);
    if (dx.data != nullptr) B::gemm(Transpose::yes, Transpose::no, 1.0f, weights(params, p), dy, 0.0f, dx);
  }
};

}  // namespace strata::nn
