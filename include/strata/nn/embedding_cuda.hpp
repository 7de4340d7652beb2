#pragma once
// Embedding's math on the Cuda device, in its own kernel module. Included by strata/cuda.hpp.
//
// On the device the output keeps every position (MaxLen columns per sample, the padding
// too): Bert masks the padding in attention there instead of packing it away (nn/bert.hpp).
// The token ids are checked on the device; a bad one is the CPU's DataError (one wait for
// the check per forward pass). Backward adds into the tables' gradients in token order, one
// thread per hidden unit, and only for each sample's tokens before its padding (all of them
// when pad_id < 0): the CPU's sums in the CPU's order.

#include <array>
#include <concepts>
#include <cstddef>
#include <utility>

#include "strata/cuda/backend.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/nn/embedding.hpp"

namespace strata::nn {

namespace detail {
inline constexpr char const embedding_body[] = R"CUDA(
__device__ __forceinline__ bool valid_id(float v, int vocab) { return v >= 0.0f && v < (float)vocab && v == floorf(v); }

// y(:, token) = word[id] + position[token % max_len] + segment[0], token = sample * max_len + t.
extern "C" __global__ void strata_embedding_forward(const float* ids, float* y, const float* word, const float* position,
                                                    const float* segment, int hidden, int max_len, i64 tokens,
                                                    int vocab, int* bad) {
  GRID_LOOP(k, tokens * hidden) {
    i64 token = k / hidden;
    int i = int(k - token * hidden);
    int t = int(token % max_len);
    float v = ids[token];
    if (!valid_id(v, vocab)) {
      atomicMin(bad, int(token));
      y[k] = 0.0f;
      continue;
    }
    y[k] = word[i64(v) * hidden + i] + position[i64(t) * hidden + i] + segment[i];
  }
}

// Sample s's tokens before its padding (trailing pad_id; at least one), as the CPU counts.
__device__ __forceinline__ int sequence_length(const float* ids, i64 s, int max_len, int pad_id) {
  int n = max_len;
  if (pad_id < 0) return n;
  const float* column = ids + s * max_len;
  while (n > 1 && column[n - 1] == (float)pad_id) --n;
  return n;
}

extern "C" __global__ void strata_embedding_backward(const float* ids, const float* dy, float* d_word, float* d_position,
                                                     float* d_segment, int hidden, int max_len, i64 samples,
                                                     int pad_id) {
  GRID_LOOP(i, hidden) {
    for (i64 s = 0; s < samples; ++s) {
      int n = sequence_length(ids, s, max_len, pad_id);
      for (int t = 0; t < n; ++t) {
        i64 token = s * max_len + t;
        float g = dy[token * hidden + i];
        d_word[i64(ids[token]) * hidden + i] += g;
        d_position[i64(t) * hidden + i] += g;
        d_segment[i] += g;
      }
    }
  }
}

// Each sample's number of tokens before its padding (Bert's lengths, as floats).
extern "C" __global__ void strata_sequence_lengths(const float* ids, float* lengths, int max_len, i64 samples,
                                                   int pad_id) {
  GRID_LOOP(s, samples) lengths[s] = (float)sequence_length(ids, s, max_len, pad_id);
}

// out = x with the columns at and after each sample's length set to zero (rows per column).
extern "C" __global__ void strata_zero_padding(const float* x, float* out, const float* lengths, int rows, int max_len,
                                               i64 n) {
  GRID_LOOP(k, n) {
    i64 column = k / rows;
    out[k] = (column % max_len) < (i64)lengths[column / max_len] ? x[k] : 0.0f;
  }
}
)CUDA";
inline constexpr auto embedding_source = cuda::join_sources(cuda::device_prelude, embedding_body);
inline constexpr std::array<char const*, 4> embedding_kernel_names = {
    "strata_embedding_forward", "strata_embedding_backward", "strata_sequence_lengths", "strata_zero_padding"};
}  // namespace detail

inline constexpr cuda::KernelModule embedding_kernels{"Embedding", cuda::source_text(detail::embedding_source),
                                                      detail::embedding_kernel_names};

template <class B>
  requires std::same_as<B, CudaBackend>
struct EmbeddingMath<B> {
  // Every position of every sample (the padding too: see the top of this file).
  static void forward(ConstMatrixView ids, MatrixView y, EmbeddingTables const& t, int /*pad_id*/) {
    auto& c = CudaBackend::ctx();
    c.reset_input_check();
    long long const tokens = (long long)ids.size();
    c.launch(embedding_kernels, 0, std::int64_t(tokens) * t.hidden, ids.data, y.data, t.word, t.position, t.segment,
             t.hidden, ids.rows, tokens, t.vocab, c.input_check());
    if (int const bad = c.read_input_check(); bad != cuda::Context::Flags::no_bad_sample) {
      float value = 0.0f;
      cuda::copy_to_host(&value, ids.data + bad, 1, c.stream());
      c.synchronize();
      throw EmbeddingMath<CpuBackend>::bad_id(value, bad % ids.rows, bad / ids.rows, t.vocab);  // the CPU's message
    }
  }

  static void zero(MatrixView m) {
    cuda::check(cudaMemsetAsync(m.data, 0, m.size() * sizeof(float), CudaBackend::ctx().stream()), "cudaMemsetAsync");
  }

  static void backward(ConstMatrixView ids, ConstMatrixView dy, EmbeddingTables const& t, int pad_id, float* d_word,
                       float* d_position, float* d_segment, int positions, int segments, bool accumulate) {
    auto& c = CudaBackend::ctx();
    if (!accumulate) {
      for (auto [at, rows] : {std::pair{d_word, t.vocab}, std::pair{d_position, positions}, std::pair{d_segment, segments}})
        cuda::check(cudaMemsetAsync(at, 0, std::size_t(rows) * std::size_t(t.hidden) * sizeof(float), c.stream()),
                    "cudaMemsetAsync");
    }
    c.launch(embedding_kernels, 1, t.hidden, ids.data, dy.data, d_word, d_position, d_segment, t.hidden, ids.rows,
             (long long)ids.cols, pad_id);
  }
};

}  // namespace strata::nn
