#pragma once
// SelfAttention<Hidden, Heads>: multi-head scaled dot-product self-attention over the tokens
// of each sample, as BERT's attention block computes it (before its output dropout):
//
//   Q = Wq x + bq,  K = Wk x + bk,  V = Wv x + bv                     (Hidden x tokens)
//   per sample and head h (d = Hidden / Heads rows of each):
//     P_h = softmax over keys of (K_h^T Q_h / sqrt(d)), keys past the sample's length masked
//     C_h = V_h dropout(P_h)
//   y = Wo C + bo
//
// A sample's tokens are its columns (columns per sample = the sequence length). The length
// of each sample, when the model provides it (ForwardContext::sequence_lengths: Bert counts
// the tokens before the padding), masks the padding as keys; padded positions still get an
// output, as in Hugging Face's BertModel. Dropout on the probabilities follows each
// probability's place in the global batch, so sharding draws the same mask.
//
// The four projections are Dense-like blocks (kernel (In, Out) row-major, then bias);
// backward needs no mask: a masked probability is 0, and so is its gradient.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
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
// probabilities and dropout mask (length x (tokens x heads): one length x length block per
// sample and head), and the geometry.
struct AttentionViews {
  MatrixView q, k, v, context;
  MatrixView probabilities, dropout_mask;
  MatrixView work;  // at least length x length floats, for one block at a time
  int heads = 1, length = 1;
};

template <class B>
struct AttentionMath {
  static_assert(policy::dependent_false<B>, "strata::SelfAttention: no math for this backend; include its device header");
};

template <>
struct AttentionMath<CpuBackend> {
  using Strided = Eigen::Map<Matrix, 0, Eigen::OuterStride<>>;
  using ConstStrided = Eigen::Map<Matrix const, 0, Eigen::OuterStride<>>;

  // Head h of sample s of a Hidden x tokens matrix: d x length, leading dimension Hidden.
  static Strided head(MatrixView m, int s, int h, int d, int length) {
    return {m.data + std::size_t(s) * std::size_t(length) * std::size_t(m.rows) + std::size_t(h) * std::size_t(d), d,
            length, Eigen::OuterStride<>(m.rows)};
  }
  static Eigen::Map<Matrix> block(MatrixView m, int s, int h, int heads, int length) {
    return {m.data + (std::size_t(s) * std::size_t(heads) + std::size_t(h)) * std::size_t(length) * std::size_t(length),
            length, length};
  }

  static void forward(AttentionViews const& a, float const* lengths, float dropout, bool training, std::uint64_t seed,
                      std::int64_t first_sample) {
    int const d = a.q.rows / a.heads, L = a.length, samples = a.q.cols / L;
    float const scale = 1.0f / std::sqrt(float(d));
    bool const drop = training && dropout > 0.0f;
    for (int s = 0; s < samples; ++s) {
      int const keys = lengths ? std::clamp(int(lengths[s]), 1, L) : L;
      for (int h = 0; h < a.heads; ++h) {
        auto P = block(a.probabilities, s, h, a.heads, L);
        P.noalias() = head(a.k, s, h, d, L).transpose() * head(a.q, s, h, d, L);
        for (int j = 0; j < L; ++j) {  // softmax over the keys of query j
          float* col = P.data() + std::size_t(j) * std::size_t(L);
          float top = -std::numeric_limits<float>::infinity();
          for (int i = 0; i < keys; ++i) top = std::max(top, col[i] * scale);
          float sum = 0.0f;
          for (int i = 0; i < keys; ++i) sum += (col[i] = std::exp(col[i] * scale - top));
          float const inverse = 1.0f / sum;
          for (int i = 0; i < keys; ++i) col[i] *= inverse;
          for (int i = keys; i < L; ++i) col[i] = 0.0f;
        }
        auto C = head(a.context, s, h, d, L);
        if (drop) {  // the dropped probabilities go through `work`; the mask is kept for backward
          auto mask = block(a.dropout_mask, s, h, a.heads, L);
          std::int64_t const first_column = ((first_sample + s) * a.heads + h) * std::int64_t(L);
          DropoutMath<CpuBackend>::dropout(ConstMatrixView{P.data(), L, L}, MatrixView{a.work.data, L, L},
                                           MatrixView{mask.data(), L, L}, dropout, seed, first_column);
          C.noalias() = head(a.v, s, h, d, L) * Eigen::Map<Matrix const>(a.work.data, L, L);
        } else {
          C.noalias() = head(a.v, s, h, d, L) * P;
        }
      }
    }
  }

  // From dC (Hidden x tokens) to dQ, dK, dV.
  static void backward(AttentionViews const& a, ConstMatrixView d_context, MatrixView dq, MatrixView dk, MatrixView dv,
                       bool dropped) {
    int const d = a.q.rows / a.heads, L = a.length, samples = a.q.cols / L;
    float const scale = 1.0f / std::sqrt(float(d));
    MatrixView const dc{const_cast<float*>(d_context.data), d_context.rows, d_context.cols};
    Eigen::Map<Matrix> W(a.work.data, L, L);
    for (int s = 0; s < samples; ++s)
      for (int h = 0; h < a.heads; ++h) {
        auto P = block(a.probabilities, s, h, a.heads, L);
        auto dC = head(dc, s, h, d, L);
        if (dropped) {
          auto mask = block(a.dropout_mask, s, h, a.heads, L);
          W = P.cwiseProduct(mask);  // the probabilities as forward used them
          head(dv, s, h, d, L).noalias() = dC * W.transpose();
          W.noalias() = head(a.v, s, h, d, L).transpose() * dC;  // d(dropped P)
          W.array() *= mask.array();
        } else {
          head(dv, s, h, d, L).noalias() = dC * P.transpose();
          W.noalias() = head(a.v, s, h, d, L).transpose() * dC;
        }
        for (int j = 0; j < L; ++j) {  // softmax backward, per query column, then the 1/sqrt(d)
          float const* p = P.data() + std::size_t(j) * std::size_t(L);
          float* g = W.data() + std::size_t(j) * std::size_t(L);
          float dot = 0.0f;
          for (int i = 0; i < L; ++i) dot += p[i] * g[i];
          for (int i = 0; i < L; ++i) g[i] = p[i] * (g[i] - dot) * scale;
        }
        head(dq, s, h, d, L).noalias() = head(a.k, s, h, d, L) * W;
        head(dk, s, h, d, L).noalias() = head(a.q, s, h, d, L) * W.transpose();
      }
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
      out.push_back({std::string(names[p]) + "/kernel", {Hidden, Hidden}, p * projection_floats});
      out.push_back({std::string(names[p]) + "/bias", {Hidden}, p * projection_floats + std::size_t(Hidden) * Hidden});
    }
    return out;
  }
  // Kept: Q, K, V, the context C, the probabilities and their dropout mask. Temporary: dQ,
  // dK, dV, dC and a length x length block. `columns` (a sample's columns) is the length.
  enum : std::size_t { q_, k_, v_, context_, probabilities_, mask_, dq_, dk_, dv_, dcontext_, work_, count_ };
  static constexpr std::array<ScratchBuffer, count_> scratch(int, int columns) {
    using K = ScratchBuffer::Keep;
    ScratchBuffer const hidden{Hidden, columns, K::kept}, temporary{Hidden, columns, K::temporary};
    ScratchBuffer const probabilities{columns, columns * Heads, K::kept};
    return {{hidden, hidden, hidden, hidden, probabilities, probabilities, temporary, temporary, temporary, temporary,
             {columns, columns, K::temporary}}};
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
    for (std::size_t p = 0; p < 3; ++p) project<B>(params, p, x, scratch[q_ + p]);
    AttentionMath<B>::forward(a, context.sequence_lengths, dropout, context.training, context.seed, context.first_sample);
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
    AttentionMath<B>::backward(a, dc, scratch[dq_], scratch[dk_], scratch[dv_], dropout > 0.0f);
    for (std::size_t p = 0; p < 3; ++p) {
      project_backward<B>(params, grads, p, x, scratch[dq_ + p], MatrixView{}, beta);
      if (dx.data != nullptr)
        B::gemm(Transpose::yes, Transpose::no, 1.0f, weights(params, p), scratch[dq_ + p], p == 0 ? 0.0f : 1.0f, dx);
    }
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
