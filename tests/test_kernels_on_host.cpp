// The Cuda kernels of BERT's layers, run on the CPU: their text, cut out of the headers at
// configure time (tests/CMakeLists.txt), compiled here as C++ with one thread standing in
// for the grid (LayerNorm's, which work in warps and blocks: a std::thread per device
// thread), and driven by the same AttentionSteps as on the device, with a plain GEMM
// standing in for cuBLAS. Checked against strata's CPU math, which packs the tokens where
// the device masks the padding. This is what CI can check of the device code without a
// GPU; `test_cuda --gpu` checks the real thing.
#include <doctest/doctest.h>

#include <algorithm>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "strata.hpp"
#include "strata/cuda.hpp"

using namespace strata;

// What the kernels' text needs of CUDA, for one thread.
typedef unsigned long long u64;
typedef long long i64;
#undef __global__  // (the CUDA headers define these for their compiler)
#undef __device__
#undef __forceinline__
#define __global__
#define __device__
#define __forceinline__ inline
#define GRID_LOOP(i, n) for (i64 i = 0; i < (n); ++i)
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
// mix64 and uniform01: strata's own (core/random.hpp, through `using namespace strata`),
// the CPU's hash that the device prelude copies.
inline int atomicMin(int* at, int value) {
  int const old = *at;
  *at = std::min(old, value);
  return old;
}
// Kernels that work in warps and blocks (LayerNorm's, attention's softmax) need more than
// one thread: there each device thread is a std::thread. Blocks run one after another, so a
// __shared__ array (a static here) is the running block's; __syncthreads is the block's
// barrier and a shuffle the warp's, so a kernel whose lanes do not meet at every shuffle
// hangs here as it would misbehave there.
namespace {
struct HostDim3 {
  unsigned x = 0;
};
thread_local HostDim3 threadIdx, blockIdx;
HostDim3 blockDim, gridDim;
struct HostWarp {
  std::barrier<> meet{cuda::warp_threads};
  double values[cuda::warp_threads]{};
};
thread_local HostWarp* this_warp = nullptr;
std::barrier<>* this_block = nullptr;
void __syncthreads() { this_block->arrive_and_wait(); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  unsigned const lane = threadIdx.x & 31u;
  this_warp->values[lane] = double(v);
  this_warp->meet.arrive_and_wait();
  T const other = T(this_warp->values[lane ^ unsigned(lane_mask)]);
  this_warp->meet.arrive_and_wait();  // every lane has read before any writes again
  return other;
}
}  // namespace
#undef __shared__
#define __shared__ static
#include "warp_body.inc"
#include "attention_body.inc"
#include "embedding_body.inc"
#include "layer_norm_body.inc"
#undef __shared__


namespace {
// `kernel` on `blocks` blocks of cuda::block_threads threads (Context::launch_blocks).
template <class... Params, class... Args>
void run_blocks(int blocks, void (*kernel)(Params...), Args... args) {
  gridDim.x = unsigned(blocks);
  blockDim.x = unsigned(cuda::block_threads);
  for (int b = 0; b < blocks; ++b) {
    std::barrier<> block(cuda::block_threads);
    this_block = &block;
    auto warps = std::make_unique<HostWarp[]>(std::size_t(cuda::block_threads / cuda::warp_threads));
    std::vector<std::thread> threads;
    for (int t = 0; t < cuda::block_threads; ++t)
      threads.emplace_back([&, t] {
        threadIdx.x = unsigned(t);
        blockIdx.x = unsigned(b);
        this_warp = &warps[std::size_t(t / cuda::warp_threads)];
        kernel(Params(args)...);
        block.arrive_and_drop();
      });
    for (auto& thread : threads) thread.join();
  }
}
// `kernel` over n threads' worth of work (Context::launch), on at most `max_blocks` blocks:
// a small cap makes the grid-stride loops go round.
template <class... Params, class... Args>
void run_threads(std::int64_t n, int max_blocks, void (*kernel)(Params...), Args... args) {
  if (n <= 0) return;
  auto const blocks = std::min<std::int64_t>((n + cuda::block_threads - 1) / cuda::block_threads, max_blocks);
  run_blocks(int(blocks), kernel, args...);
}

// The largest |got - want| and the largest |want|, to bound the one by a share of the other.
struct Difference {
  double worst = 0.0, largest = 0.0;
};
Difference difference(std::vector<float> const& got, std::vector<float> const& want) {
  Difference d;
  for (std::size_t i = 0; i < got.size(); ++i) {
    d.worst = std::max(d.worst, double(std::abs(got[i] - want[i])));
    d.largest = std::max(d.largest, double(std::abs(want[i])));
  }
  return d;
}

// cuBLAS's strided-batched GEMM, column-major, summed in double.
struct HostExecutor {
  void gemm_batched(bool ta, bool tb, int m, int n, int k, float alpha, nn::StridedFloats a, nn::StridedFloats b,
                    float beta, float* c, int ldc, long long stride_c, int batch) {
    for (int x = 0; x < batch; ++x)
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double sum = 0.0;
          for (int p = 0; p < k; ++p) {
            float const av = ta ? a.data[x * a.stride + i * i64(a.ld) + p] : a.data[x * a.stride + p * i64(a.ld) + i];
            float const bv = tb ? b.data[x * b.stride + p * i64(b.ld) + j] : b.data[x * b.stride + j * i64(b.ld) + p];
            sum += double(av) * double(bv);
          }
          float& out = c[x * stride_c + j * i64(ldc) + i];
          out = float(alpha * sum + (beta == 0.0f ? 0.0 : double(beta) * out));
        }
  }
  // The softmax kernels work a warp per column: over n threads, in warps, on a capped
  // grid (so that their loop goes round); the others in one thread.
  template <nn::AttentionKernel K, class... Args>
  void launch(long long n, Args... args) {
    if constexpr (K == nn::attention_softmax) run_threads(n, 2, strata_attention_softmax, args...);
    else if constexpr (K == nn::attention_dropout) strata_attention_dropout(args...);
    else if constexpr (K == nn::attention_masked) strata_attention_masked(args...);
    else if constexpr (K == nn::attention_softmax_backward)
      run_threads(n, 2, strata_attention_softmax_backward, args...);
    else strata_attention_fill(args...);
  }
};

std::vector<float> random_floats(Rng& rng, std::size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform() - 0.5f;
  return v;
}

}  // namespace

namespace {
// SelfAttention on the device's steps and kernels against the CPU's packed math, for
// sequences of length L (3 samples, of `lengths` tokens).
void check_attention(int const L, std::vector<float> const& lengths) {
  int const hidden = 8, heads = 2, samples = 3;
  std::int64_t const first_sample = 5;
  Rng rng(3);
  auto const q = random_floats(rng, hidden * L * samples), k = random_floats(rng, hidden * L * samples),
             v = random_floats(rng, hidden * L * samples);
  auto dc = random_floats(rng, hidden * L * samples);
  auto padding = [&](int s, int t) { return t >= int(lengths[std::size_t(s)]); };
  for (int s = 0; s < samples; ++s)  // Bert zeroes the padding's incoming gradient
    for (int t = 0; t < L; ++t)
      if (padding(s, t)) std::fill_n(dc.begin() + (s * L + t) * hidden, hidden, 0.0f);
  auto pack = [&](std::vector<float> const& x) {
    std::vector<float> out;
    for (int s = 0; s < samples; ++s)
      for (int t = 0; t < L; ++t)
        if (!padding(s, t)) out.insert(out.end(), x.begin() + (s * L + t) * hidden, x.begin() + (s * L + t + 1) * hidden);
    return out;
  };
  int const tokens = int(pack(q).size()) / hidden;
  for (float const rate : {0.0f, 0.3f}) {
    CAPTURE(rate);
    bool const drop = rate > 0.0f;
    std::size_t const n = std::size_t(hidden) * L * samples, blocks = std::size_t(samples) * heads * L * L;
    // The device's layout, padded.
    std::vector<float> p(blocks), mask(blocks), work(std::size_t(samples) * L * L), c(n), dq(n), dk(n), dv(n);
    nn::AttentionViews const padded{{const_cast<float*>(q.data()), hidden, L * samples},
                                    {const_cast<float*>(k.data()), hidden, L * samples},
                                    {const_cast<float*>(v.data()), hidden, L * samples},
                                    {c.data(), hidden, L * samples},
                                    {p.data(), L, L * heads * samples},
                                    {mask.data(), L, L * heads * samples},
                                    {work.data(), L, L * samples},
                                    heads,
                                    L};
    HostExecutor e;
    nn::AttentionSteps<HostExecutor>::forward(e, padded, lengths.data(), samples, rate, drop, 77, first_sample);
    nn::AttentionSteps<HostExecutor>::backward(e, padded, samples, ConstMatrixView{dc.data(), hidden, L * samples},
                                               {dq.data(), hidden, L * samples}, {dk.data(), hidden, L * samples},
                                               {dv.data(), hidden, L * samples}, drop);
    // The CPU's, packed.
    auto pq = pack(q), pk = pack(k), pv = pack(v), pdc = pack(dc);
    std::vector<float> cp(blocks), cmask(blocks), cwork(std::size_t(L) * L), cc(std::size_t(hidden) * tokens),
        cdq(cc.size()), cdk(cc.size()), cdv(cc.size());
    nn::AttentionViews const packed{{pq.data(), hidden, tokens},        {pk.data(), hidden, tokens},
                                    {pv.data(), hidden, tokens},        {cc.data(), hidden, tokens},
                                    {cp.data(), L, L * heads * samples}, {cmask.data(), L, L * heads * samples},
                                    {cwork.data(), L, L},               heads,
                                    L};
    nn::AttentionMath<CpuBackend>::forward(packed, lengths.data(), samples, rate, drop, 77, first_sample);
    nn::AttentionMath<CpuBackend>::backward(packed, lengths.data(), samples, ConstMatrixView{pdc.data(), hidden, tokens},
                                            {cdq.data(), hidden, tokens}, {cdk.data(), hidden, tokens},
                                            {cdv.data(), hidden, tokens}, drop);
    for (auto [device, cpu] : {std::pair{&c, &cc}, std::pair{&dq, &cdq}, std::pair{&dk, &cdk}, std::pair{&dv, &cdv}}) {
      auto const at_tokens = pack(*device);
      auto const [worst, largest] = difference(at_tokens, *cpu);
      CHECK(largest > 1e-3);
      CHECK(worst <= 1e-6 * largest);  // float rounding only (the GEMM here sums in double)
      for (int s = 0; s < samples; ++s)
        for (int t = 0; t < L; ++t)
          if (padding(s, t))
            for (int i = 0; i < hidden; ++i) CHECK((*device)[std::size_t((s * L + t) * hidden + i)] == 0.0f);
    }
  }
}

}  // namespace

// Length 6: a query column shorter than a warp; 40: longer (a lane takes two keys), with a
// sample of 33 tokens, one past a warp.
TEST_CASE("SelfAttention's device steps, on the CPU: the packed CPU math at the tokens, zeros at the padding") {
  SUBCASE("length 6") { check_attention(6, {4, 6, 2}); }
  SUBCASE("length 40") { check_attention(40, {33, 40, 7}); }
}

TEST_CASE("Embedding's and Bert's device kernels, on the CPU: the CPU's lookup and sums, bit for bit, and the first bad id") {
  int const vocab = 11, hidden = 5, L = 4, samples = 3, pad_id = 0;
  std::vector<float> ids = {2, 7, 3, 0, 2, 9, 9, 3, 2, 3, 0, 0};
  Rng rng(4);
  auto const tables = random_floats(rng, std::size_t(vocab + L + 2) * hidden);
  float const* word = tables.data();
  float const* position = word + vocab * hidden;
  float const* segment = position + L * hidden;
  nn::EmbeddingTables const t{word, position, segment, vocab, hidden};

  std::vector<float> lengths(samples);
  strata_sequence_lengths(ids.data(), lengths.data(), L, samples, pad_id);
  CHECK(lengths == std::vector<float>{3, 4, 2});

  std::vector<float> y(std::size_t(hidden) * L * samples), cpu_y(y.size());
  int bad = cuda::Context::Flags::no_bad_sample;
  strata_embedding_forward(ids.data(), y.data(), word, position, segment, hidden, L, L * samples, vocab, &bad);
  CHECK(bad == cuda::Context::Flags::no_bad_sample);
  nn::EmbeddingMath<CpuBackend>::forward(ConstMatrixView{ids.data(), L, samples}, MatrixView{cpu_y.data(), hidden, 9}, t,
                                         pad_id);
  auto dy = random_floats(rng, y.size());
  std::vector<float> masked(dy.size()), packed_dy;
  strata_zero_padding(dy.data(), masked.data(), lengths.data(), hidden, L, i64(dy.size()));
  int token = 0;
  for (int s = 0; s < samples; ++s)
    for (int p = 0; p < L; ++p)
      for (int i = 0; i < hidden; ++i) {
        float const got = y[std::size_t((s * L + p) * hidden + i)];
        if (p < int(lengths[std::size_t(s)])) {
          CHECK(got == cpu_y[std::size_t(token * hidden + i)]);
          CHECK(masked[std::size_t((s * L + p) * hidden + i)] == dy[std::size_t((s * L + p) * hidden + i)]);
          packed_dy.push_back(dy[std::size_t((s * L + p) * hidden + i)]);
          if (i + 1 == hidden) ++token;
        } else {
          CHECK(masked[std::size_t((s * L + p) * hidden + i)] == 0.0f);
        }
      }
  std::vector<float> grads(tables.size(), 0.0f), cpu_grads(tables.size(), 0.0f);
  strata_embedding_backward(ids.data(), masked.data(), grads.data(), grads.data() + vocab * hidden,
                            grads.data() + (vocab + L) * hidden, hidden, L, samples, pad_id);
  nn::EmbeddingMath<CpuBackend>::backward(ConstMatrixView{ids.data(), L, samples}, ConstMatrixView{packed_dy.data(), hidden, token},
                                          t, pad_id, cpu_grads.data(), cpu_grads.data() + vocab * hidden,
                                          cpu_grads.data() + (vocab + L) * hidden, L, 2, false);
  CHECK(grads == cpu_grads);

  ids[5] = 11;  // position 1 of sample 1: not an id
  ids[9] = 2.5f;
  strata_embedding_forward(ids.data(), y.data(), word, position, segment, hidden, L, L * samples, vocab, &bad);
  CHECK(bad == 5);  // the first, in token order
}


// The device's launches as nn/layer_norm_cuda.hpp makes them: a warp per column, a block per
// 32 rows. 70 rows: two full blocks of rows and one of 6; 37 columns over at most 2 blocks of
// 8 warps, so the warps' loop goes round three times.
TEST_CASE("LayerNorm's device kernels, on the CPU in warps and blocks: the CPU's statistics, output and gradients") {
  int const rows = 70, cols = 37;
  float const epsilon = 1e-5f;
  Rng rng(5);
  auto const x = random_floats(rng, std::size_t(rows) * cols), dy = random_floats(rng, x.size());
  auto gamma = random_floats(rng, rows), beta = random_floats(rng, rows);
  for (float& g : gamma) g += 1.0f;
  auto const start = random_floats(rng, 2 * std::size_t(rows));  // gradients already there, for accumulate

  std::vector<float> y(x.size()), mean(cols), rstd(cols), cpu_y(x.size()), cpu_mean(cols), cpu_rstd(cols);
  std::int64_t const warp_per_column = std::int64_t(cols) * cuda::warp_threads;  // the device's launch
  run_threads(warp_per_column, 2, strata_layer_norm_forward, x.data(), y.data(), gamma.data(), beta.data(), mean.data(),
              rstd.data(), rows, (long long)cols, epsilon);
  nn::LayerNormViews const cpu_views{gamma.data(), beta.data(), {cpu_mean.data(), 1, cols}, {cpu_rstd.data(), 1, cols}};
  ConstMatrixView const x_view{x.data(), rows, cols}, dy_view{dy.data(), rows, cols};
  nn::LayerNormMath<CpuBackend>::forward(x_view, MatrixView{cpu_y.data(), rows, cols}, cpu_views, epsilon);
  for (auto const& [got, want] : {std::pair{&mean, &cpu_mean}, std::pair{&rstd, &cpu_rstd}}) {
    auto const d = difference(*got, *want);
    CHECK(d.worst <= 1e-6 * d.largest);
  }
  auto const output = difference(y, cpu_y);
  CHECK(output.worst <= 1e-6 * output.largest);
  CHECK(output.largest > 0.5);

  for (bool const accumulate : {false, true}) {
    CAPTURE(accumulate);
    std::vector<float> dx(x.size()), grads(start), cpu_dx(x.size()), cpu_grads(start);
    if (!accumulate) std::fill(grads.begin(), grads.end(), std::numeric_limits<float>::quiet_NaN());  // all written
    run_blocks((rows + 31) / 32, strata_layer_norm_backward_parameters, x.data(), dy.data(), mean.data(), rstd.data(),
               grads.data(), grads.data() + rows, rows, (long long)cols, int(accumulate));
    run_threads(warp_per_column, 2, strata_layer_norm_backward_input, x.data(), dy.data(), dx.data(), gamma.data(),
                mean.data(), rstd.data(), rows, (long long)cols);
    nn::LayerNormMath<CpuBackend>::backward(x_view, dy_view, MatrixView{cpu_dx.data(), rows, cols}, cpu_views,
                                            cpu_grads.data(), cpu_grads.data() + rows, accumulate);
    auto const input = difference(dx, cpu_dx);
    CHECK(input.worst <= 1e-6 * input.largest);
    CHECK(input.largest > 0.1);
    CHECK(std::none_of(grads.begin(), grads.end(), [](float g) { return std::isnan(g); }));
    auto const parameters = difference(grads, cpu_grads);
    CHECK(parameters.worst <= 1e-5 * parameters.largest);  // float sums, in another order
    CHECK(parameters.largest > 0.5);
  }
}
