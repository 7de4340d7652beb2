#pragma once
// Embedding<Vocab, Hidden, MaxLen, Segments>: BERT's input embedding. A sample is MaxLen
// token ids (floats holding integers, right-padded); each token becomes one column,
//
//   y(:, token t of sample s) = word[id] + position[t] + segment[0]
//
// so a sample's one input column becomes MaxLen output columns (or, with pad_id set, only
// its tokens before the padding: Bert's packed layout, which skips the padding's work).
// Every token is in segment 0 (single-sentence input; sentence pairs are not supported
// yet), but the segment table is there to load and train, as BERT's checkpoints have it. The tables are stored a row per
// id, exactly as Hugging Face's (Vocab, Hidden) tensors.
//
// Backward touches only the rows of the ids in the batch (a scatter-add, in token order,
// so the sums are the same on every run); the rest of the gradient block is zero.

#include <algorithm>
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

// The tokens of sample s of a column-per-sample id matrix: 1 + the position of its last id
// that is not `pad_id` (all of them when pad_id < 0; at least one).
inline int sequence_length(ConstMatrixView ids, int s, int pad_id) {
  int length = ids.rows;
  if (pad_id < 0) return length;
  float const* column = ids.data + std::size_t(s) * std::size_t(ids.rows);
  while (length > 1 && column[length - 1] == float(pad_id)) --length;
  return length;
}

template <class B>
struct EmbeddingMath {
  static_assert(policy::dependent_false<B>, "strata::Embedding: no math for this backend; include its device header (strata/cuda.hpp for Cuda)");
};

// The tables of one Embedding: `hidden` floats per row.
struct EmbeddingTables {
  float const* word = nullptr;
  float const* position = nullptr;
  float const* segment = nullptr;
  int vocab = 0, hidden = 0;
};

template <class B>
  requires std::same_as<B, CpuBackend>
struct EmbeddingMath<B> {
  // The id at (position t, sample s), or a DataError naming both.
  static int token_id(ConstMatrixView ids, int t, int s, int vocab) {
    float const v = ids.data[std::size_t(s) * std::size_t(ids.rows) + std::size_t(t)];
    if (!(v >= 0.0f && v < float(vocab) && v == std::floor(v))) throw bad_id(v, t, s, vocab);
    return int(v);
  }
  static DataError bad_id(float v, int t, int s, int vocab) {
    return DataError(strata::detail::message("Embedding: token id ", v, " at position ", t, " of sample ", s,
                                             " in this batch is not an id in [0, ", vocab, ")"));
  }

  static void zero(MatrixView m) { std::fill_n(m.data, m.size(), 0.0f); }

  // Output column by column: each sample's first `length` tokens (all of them, or those
  // before its padding when pad_id >= 0), one sample after another.
  static void forward(ConstMatrixView ids, MatrixView y, EmbeddingTables const& t, int pad_id) {
    int const h = t.hidden;
    float* out = y.data;
    for (int s = 0; s < ids.cols; ++s) {
      int const length = sequence_length(ids, s, pad_id);
      for (int p = 0; p < length; ++p, out += h) {
        float const* word = t.word + std::size_t(token_id(ids, p, s, t.vocab)) * std::size_t(h);
        float const* position = t.position + std::size_t(p) * std::size_t(h);
        for (int i = 0; i < h; ++i) out[i] = word[i] + position[i] + t.segment[i];
      }
    }
  }

  static void backward(ConstMatrixView ids, ConstMatrixView dy, EmbeddingTables const& t, int pad_id, float* d_word,
                       float* d_position, float* d_segment, int positions, int segments, bool accumulate) {
    int const h = t.hidden;
    if (!accumulate) {
      std::fill_n(d_word, std::size_t(t.vocab) * std::size_t(h), 0.0f);
      std::fill_n(d_position, std::size_t(positions) * std::size_t(h), 0.0f);
      std::fill_n(d_segment, std::size_t(segments) * std::size_t(h), 0.0f);
    }
    float const* g = dy.data;
    for (int s = 0; s < ids.cols; ++s) {
      int const length = sequence_length(ids, s, pad_id);
      for (int p = 0; p < length; ++p, g += h) {
        float* word = d_word + std::size_t(token_id(ids, p, s, t.vocab)) * std::size_t(h);
        float* position = d_position + std::size_t(p) * std::size_t(h);
        for (int i = 0; i < h; ++i) {
          word[i] += g[i];
          position[i] += g[i];
          d_segment[i] += g[i];
        }
      }
    }
  }
};

template <int Vocab, int Hidden, int MaxLen, int Segments = 2>
struct Embedding {
  static_assert(Vocab >= 1 && Hidden >= 1 && MaxLen >= 1 && Segments >= 1,
                "strata::Embedding<Vocab, Hidden, MaxLen, Segments>: every size must be at least 1");
  float init_stddev = 0.02f;  // BERT's initializer_range: N(0, 0.02) in every table
  // >= 0: the ids equal to it at the end of a sample are padding, and the output holds only
  // each sample's tokens before it, packed (Bert's unpadded layout). -1: every position.
  int pad_id = -1;

  static constexpr int input_width = MaxLen;
  static constexpr bool takes_ids = true;
  static constexpr int output_width(int) { return Hidden; }
  static constexpr int output_columns(int columns) { return columns * MaxLen; }
  static constexpr std::size_t word_floats = std::size_t(Vocab) * Hidden;
  static constexpr std::size_t position_floats = std::size_t(MaxLen) * Hidden;
  static constexpr std::size_t parameter_count(int) { return word_floats + position_floats + std::size_t(Segments) * Hidden; }
  static std::string name() {
    return "Embedding<" + std::to_string(Vocab) + ", " + std::to_string(Hidden) + ", " + std::to_string(MaxLen) + ">";
  }
  static constexpr char const* kind = "embedding";
  static std::vector<ParameterTensor> parameter_tensors(int) {
    return {{"word_embeddings", {Vocab, Hidden}, 0},
            {"position_embeddings", {MaxLen, Hidden}, word_floats},
            {"token_type_embeddings", {Segments, Hidden}, word_floats + position_floats}};
  }

  void initialize(float* params, int, Rng& rng) const {
    if (!(init_stddev >= 0.0f) || !std::isfinite(init_stddev))
      throw ConfigError(strata::detail::message("Embedding: init_stddev ", init_stddev, " must be a finite number >= 0"));
    // Box-Muller from the run's generator: the same tables on every machine.
    std::size_t const n = parameter_count(Hidden);
    for (std::size_t i = 0; i < n; i += 2) {
      float const u1 = std::max(rng.uniform(), 1e-7f), u2 = rng.uniform();
      float const r = init_stddev * std::sqrt(-2.0f * std::log(u1));
      params[i] = r * std::cos(6.28318530718f * u2);
      if (i + 1 < n) params[i + 1] = r * std::sin(6.28318530718f * u2);
    }
  }

  template <class B>
  void forward(float const* params, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    EmbeddingMath<B>::forward(x, y, tables(params), pad_id);
  }
  // The ids have no gradient: dx, where asked for, is zero.
  template <class B>
  void backward(float const* params, float* grads, ConstMatrixView x, ConstMatrixView, Scratch, ConstMatrixView dy,
                MatrixView dx, bool accumulate) const {
    EmbeddingMath<B>::backward(x, dy, tables(params), pad_id, grads, grads + word_floats,
                               grads + word_floats + position_floats, MaxLen, Segments, accumulate);
    if (dx.data != nullptr) EmbeddingMath<B>::zero(dx);
  }

 private:
  static EmbeddingTables tables(float const* params) {
    return {params, params + word_floats, params + word_floats + position_floats, Vocab, Hidden};
  }
};

}  // namespace strata::nn
