#pragma once
// SelfAttention's core on the Cuda device: per head, one strided-batched cuBLAS GEMM over
// the samples for K^T Q, a softmax kernel, dropout, and one batched GEMM for V P; backward
// the same way. Included by strata/cuda.hpp.
//
// On the device every sample keeps `length` columns (Bert does not pack there); when
// lengths are given, a sample's keys at and after its length are masked (probability 0), and
// its queries there get an all-zero column, so the padding neither feeds nor receives
// anything. The probabilities sit where the CPU puts them for a sample of `length` tokens,
// and dropout draws the CPU's mask bits for (sample, head, query, key): with the same
// lengths both devices compute the same function.

#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>

#include "strata/cuda/backend.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/nn/attention.hpp"

namespace strata::nn {

namespace detail {
inline constexpr char const attention_body[] = R"CUDA(
// The L x L block of head h of sample s: blocks of a sample's heads one after another.
__device__ __forceinline__ i64 block_of(i64 s, int heads, int h, int L) { return (s * heads + h) * i64(L) * L; }
__device__ __forceinline__ int tokens_of(const float* lengths, i64 s, int L) { return lengths ? int(lengths[s]) : L; }

// Softmax over the first n keys of each query column j < n of head h (scores scaled
// first); the masked keys and the padding's query columns become 0. A warp per column: its
// lanes take every 32nd key and meet in warp_max and warp_sum.
extern "C" __global__ void strata_attention_softmax(float* p, const float* lengths, int heads, int h, int L, i64 samples,
                                                    float scale) {
  const int lane = threadIdx.x & 31;
  WARP_LOOP(c, samples * L) {
    i64 s = c / L;
    int j = int(c - s * L), n = tokens_of(lengths, s, L);
    float* col = p + block_of(s, heads, h, L) + i64(j) * L;
    if (j >= n) {
      for (int i = lane; i < L; i += 32) col[i] = 0.0f;
      continue;
    }
    float top = -__int_as_float(0x7f800000);  // -infinity
    for (int i = lane; i < n; i += 32) top = fmaxf(top, col[i] * scale);
    top = warp_max(top);
    float sum = 0.0f;
    for (int i = lane; i < n; i += 32) sum += (col[i] = expf(col[i] * scale - top));
    float inverse = 1.0f / warp_sum(sum);
    for (int i = lane; i < n; i += 32) col[i] *= inverse;
    for (int i = n + lane; i < L; i += 32) col[i] = 0.0f;
  }
}

// Dropout on head h's probabilities: the mask into its place, the dropped probabilities
// into work (an L x L block per sample). The bits of (key i, query j) are the CPU's:
// column ((first_sample + s) * heads + h) * L + j, row i.
extern "C" __global__ void strata_attention_dropout(const float* p, float* mask, float* work, int heads, int h, int L,
                                                    i64 samples, float rate, u64 seed, i64 first_sample) {
  float keep_scale = 1.0f / (1.0f - rate);
  GRID_LOOP(k, samples * L * L) {
    i64 s = k / (i64(L) * L);
    i64 r = k - s * L * L;
    i64 j = r / L, i = r - j * L;
    u64 column_seed = mix64(seed, u64(((first_sample + s) * heads + h) * L + j));
    float m = uniform01(mix64(column_seed, u64(i))) >= rate ? keep_scale : 0.0f;
    i64 at = block_of(s, heads, h, L) + r;
    mask[at] = m;
    work[k] = p[at] * m;
  }
}

// work = p .* mask (mode 0: the dropped probabilities again) or work .* mask (mode 1: the
// gradient through dropout), for head h.
extern "C" __global__ void strata_attention_masked(const float* p, const float* mask, float* work, int heads, int h,
                                                   int L, i64 samples, int mode) {
  GRID_LOOP(k, samples * L * L) {
    i64 s = k / (i64(L) * L);
    i64 at = block_of(s, heads, h, L) + (k - s * L * L);
    work[k] = (mode == 0 ? p[at] : work[k]) * mask[at];
  }
}

// Softmax backward in place on work (the gradient of head h's probabilities), then the
// 1/sqrt(d): g_i = p_i (g_i - sum_k p_k g_k) * scale. A warp per query column.
extern "C" __global__ void strata_attention_softmax_backward(const float* p, float* work, int heads, int h, int L,
                                                             i64 samples, float scale) {
  const int lane = threadIdx.x & 31;
  WARP_LOOP(c, samples * L) {
    i64 s = c / L;
    int j = int(c - s * L);
    const float* pc = p + block_of(s, heads, h, L) + i64(j) * L;
    float* g = work + s * L * L + i64(j) * L;
    float dot = 0.0f;
    for (int i = lane; i < L; i += 32) dot += pc[i] * g[i];
    dot = warp_sum(dot);
    for (int i = lane; i < L; i += 32) g[i] = pc[i] * (g[i] - dot) * scale;
  }
}

// lengths[s] = value (SelfAttention without Bert's lengths: every sample is full).
extern "C" __global__ void strata_attention_fill(float* lengths, i64 samples, float value) {
  GRID_LOOP(s, samples) lengths[s] = value;
}
)CUDA";
inline constexpr auto attention_source = cuda::join_sources(cuda::device_prelude, cuda::warp_body, attention_body);
inline constexpr std::array<char const*, 5> attention_kernel_names = {
    "strata_attention_softmax", "strata_attention_dropout", "strata_attention_masked",
    "strata_attention_softmax_backward", "strata_attention_fill"};
}  // namespace detail

inline constexpr cuda::KernelModule attention_kernels{"SelfAttention", cuda::source_text(detail::attention_source),
                                                      detail::attention_kernel_names};

// The order of the work, over an executor `E` that runs one GEMM batch
// (`gemm_batched(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c, ldc, stride_c,
// batch)`, cuda::Context's) and one kernel of the module (`launch<AttentionKernel>(n,
// args...)`): the device's executor below, and tests/test_kernels_on_host.cpp's, which runs
// the same kernels' text on the CPU.
enum AttentionKernel : std::size_t { attention_softmax, attention_dropout, attention_masked, attention_softmax_backward,
                                     attention_fill };
using StridedFloats = cuda::Context::Strided;

template <class E>
struct AttentionSteps {
  using Strided = StridedFloats;
  static constexpr long long warp_per_query = cuda::warp_threads;  // the softmax kernels' threads per query column

  static void forward(E& e, AttentionViews const& a, float const* lengths, int samples, float dropout, bool training,
                      std::uint64_t seed, std::int64_t first_sample) {
    int const d = a.q.rows / a.heads, L = a.length, H = a.q.rows;
    float const scale = 1.0f / std::sqrt(float(d));
    bool const drop = training && dropout > 0.0f;
    long long const hidden_stride = (long long)L * H, block = (long long)L * L, sample_blocks = block * a.heads;
    for (int h = 0; h < a.heads; ++h) {
      long long const head = (long long)h * d;
      float* p = a.probabilities.data + h * block;
      // Scores: keys x queries, K_h^T Q_h per sample.
      e.gemm_batched(true, false, L, L, d, 1.0f, Strided{a.k.data + head, H, hidden_stride},
                     Strided{a.q.data + head, H, hidden_stride}, 0.0f, p, L, sample_blocks, samples);
      e.template launch<attention_softmax>(warp_per_query * samples * L, a.probabilities.data, lengths, a.heads, h, L,
                                           (long long)samples, scale);
      Strided probabilities{p, L, sample_blocks};
      if (drop) {
        e.template launch<attention_dropout>((long long)samples * block, static_cast<float const*>(a.probabilities.data),
                                             a.dropout_mask.data, a.work.data, a.heads, h, L, (long long)samples,
                                             dropout, (unsigned long long)seed, (long long)first_sample);
        probabilities = {a.work.data, L, block};
      }
      e.gemm_batched(false, false, d, L, L, 1.0f, Strided{a.v.data + head, H, hidden_stride}, probabilities, 0.0f,
                     a.context.data + head, H, hidden_stride, samples);
    }
  }

  static void backward(E& e, AttentionViews const& a, int samples, ConstMatrixView d_context, MatrixView dq,
                       MatrixView dk, MatrixView dv, bool dropped) {
    int const d = a.q.rows / a.heads, L = a.length, H = a.q.rows;
    float const scale = 1.0f / std::sqrt(float(d));
    long long const hidden_stride = (long long)L * H, block = (long long)L * L, sample_blocks = block * a.heads;
    float const* probabilities = a.probabilities.data;
    float const* mask = a.dropout_mask.data;
    for (int h = 0; h < a.heads; ++h) {
      long long const head = (long long)h * d;
      Strided const dc{d_context.data + head, H, hidden_stride};
      Strided used{probabilities + h * block, L, sample_blocks};  // P as forward used it
      if (dropped) {
        e.template launch<attention_masked>((long long)samples * block, probabilities, mask, a.work.data, a.heads, h, L,
                                            (long long)samples, 0);
        used = {a.work.data, L, block};
      }
      // dV_h = dC_h P^T; then W = V_h^T dC_h, the gradient of the (dropped) probabilities.
      e.gemm_batched(false, true, d, L, L, 1.0f, dc, used, 0.0f, dv.data + head, H, hidden_stride, samples);
      e.gemm_batched(true, false, L, L, d, 1.0f, Strided{a.v.data + head, H, hidden_stride}, dc, 0.0f, a.work.data, L,
                     block, samples);
      if (dropped)
        e.template launch<attention_masked>((long long)samples * block, probabilities, mask, a.work.data, a.heads, h, L,
                                            (long long)samples, 1);
      e.template launch<attention_softmax_backward>(warp_per_query * samples * L, probabilities, a.work.data, a.heads,
                                                    h, L, (long long)samples, scale);
      // dQ_h = K_h W, dK_h = Q_h W^T.
      Strided const w{a.work.data, L, block};
      e.gemm_batched(false, false, d, L, L, 1.0f, Strided{a.k.data + head, H, hidden_stride}, w, 0.0f, dq.data + head,
                     H, hidden_stride, samples);
      e.gemm_batched(false, true, d, L, L, 1.0f, Strided{a.q.data + head, H, hidden_stride}, w, 0.0f, dk.data + head,
                     H, hidden_stride, samples);
    }
  }
};

// The device's executor: the bound context's cuBLAS and this module's kernels.
struct CudaAttentionExecutor {
  cuda::Context& context;
  void gemm_batched(bool ta, bool tb, int m, int n, int k, float alpha, StridedFloats a, StridedFloats b, float beta,
                    float* c, int ldc, long long stride_c, int batch) {
    context.gemm_batched(ta, tb, m, n, k, alpha, a, b, beta, c, ldc, stride_c, batch);
  }
  template <AttentionKernel K, class... Args>
  void launch(long long n, Args... args) {
    context.launch(attention_kernels, K, std::int64_t(n), args...);
  }
};

template <class B>
  requires std::same_as<B, CudaBackend>
struct AttentionMath<B> {
  // The samples' lengths into `kept` (a device row): Bert's, or `length` for every sample.
  static void keep_lengths(float const* given, MatrixView kept, int length) {
    auto& c = CudaBackend::ctx();
    if (given) cuda::copy_on_device(kept.data, given, std::size_t(kept.cols), c.stream());
    else c.launch(attention_kernels, attention_fill, kept.cols, kept.data, (long long)kept.cols, float(length));
  }
  static void forward(AttentionViews const& a, float const* lengths, int samples, float dropout, bool training,
                      std::uint64_t seed, std::int64_t first_sample) {
    CudaAttentionExecutor e{CudaBackend::ctx()};
    AttentionSteps<CudaAttentionExecutor>::forward(e, a, lengths, samples, dropout, training, seed, first_sample);
  }
  static void backward(AttentionViews const& a, float const* /*lengths: the zeros of P mask*/, int samples,
                       ConstMatrixView d_context, MatrixView dq, MatrixView dk, MatrixView dv, bool dropped) {
    CudaAttentionExecutor e{CudaBackend::ctx()};
    AttentionSteps<CudaAttentionExecutor>::backward(e, a, samples, d_context, dq, dk, dv, dropped);
  }
};

}  // namespace strata::nn
