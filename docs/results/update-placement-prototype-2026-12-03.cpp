// Prototype, not part of the library (issue 22, eleventh round, docs/benchmarks.md
// "Where the update runs"): does the SGD-with-momentum update of a weight matrix get
// cheaper when it runs right where the weight-gradient product makes each part of the
// gradient, instead of in its own pass afterwards? One thread's half of a OneDevice
// mixed step's Dense<1024, 1024> weight gradient (1024 x 512, inner dimension 256) on
// strata's bf16 kernel, then the update of those 512 Ki weights as the step does it: scale
// the gradient, momentum, weights, the bf16 copy, the packed copy (pack_a_elements,
// streamed). Four sets of weights in turn, so that each is cold, as in a step.
//   product_only                 the product alone
//   product_then_update          the product, then the update in 2,048-float chunks (today's step)
//   update_per_8_columns         the product 8 columns at a time, each block updated at once (gradient in L1/L2)
//   update_per_8_columns_prefetch  the same, the next block's weights and momentum prefetched meanwhile
//   update_in_tile_epilogue      the update inside the kernel's 32 x 8 tile: no gradient stored at all
// Build: g++ -O3 -march=native -std=c++20 -DNDEBUG -Iinclude <this file> -lbenchmark -lpthread
// Results: docs/results/update-placement-2026-12-03-zen4.txt
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <vector>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <strata/core/dtype.hpp>
#include <strata/core/bf16_gemm.hpp>
namespace gemm = strata::bf16_gemm;
using strata::bf16;
constexpr int M = 1024, K = 256, SETS = 4;
template <class T> struct AlignedAlloc { using value_type = T; AlignedAlloc() = default; template <class U> AlignedAlloc(AlignedAlloc<U> const&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64)); }
  void deallocate(T* p, std::size_t) { std::free(p); } bool operator==(AlignedAlloc const&) const { return true; } };
template <class T> using Vec = std::vector<T, AlignedAlloc<T>>;
struct Set { Vec<float> w, v, g; Vec<bf16> halves, packed; };
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))
void update(Set& s, std::size_t begin, std::size_t count, int n, float scale) {
  alignas(64) float red[2048];
  for (std::size_t c0 = begin; c0 < begin + count; c0 += 2048) {
    std::size_t const cnt = std::min<std::size_t>(2048, begin + count - c0);
    for (std::size_t i = 0; i < cnt; ++i) red[i] = s.g[c0 + i] * scale;
    for (std::size_t i = 0; i < cnt; i += 16) {
      __m512 g = _mm512_load_ps(red + i), v = _mm512_loadu_ps(&s.v[c0 + i]), w = _mm512_loadu_ps(&s.w[c0 + i]);
      v = _mm512_fmsub_ps(_mm512_set1_ps(0.9f), v, _mm512_mul_ps(_mm512_set1_ps(0.01f), g));
      w = _mm512_add_ps(w, v);
      _mm512_storeu_ps(&s.v[c0 + i], v); _mm512_storeu_ps(&s.w[c0 + i], w);
      __m256bh h = _mm512_cvtneps_pbh(w);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&s.halves[c0 + i]), reinterpret_cast<__m256i&>(h));
    }
    gemm::pack_a_elements(s.packed.data(), s.w.data() + c0, M, n, c0, c0 + cnt);
  }
}

// Prototype: the kernel's tile with the SGD-momentum update in its epilogue (no gradient stored).
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))
inline void tile_update(int count, std::uint16_t const* a, std::uint16_t const* b, float scale, float* w, float* v,
                        std::uint16_t* halves, std::uint16_t* packed, int ldw) {
  constexpr int nr = 8;
  __m512 top[nr], bottom[nr];
  for (int j = 0; j < nr; ++j) top[j] = bottom[j] = _mm512_setzero_ps();
  for (int p = 0; p < count; ++p, a += 64, b += 16) {
    __m512bh const a_top = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a));
    __m512bh const a_bottom = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + 32));
#pragma GCC unroll 8
    for (int j = 0; j < nr; ++j) {
      std::int32_t pair;
      std::memcpy(&pair, b + j * 2, sizeof pair);
      __m512bh const b_j = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      top[j] = _mm512_dpbf16_ps(top[j], a_top, b_j);
      bottom[j] = _mm512_dpbf16_ps(bottom[j], a_bottom, b_j);
    }
  }
  __m512 const s = _mm512_set1_ps(scale), mu = _mm512_set1_ps(0.9f), lr = _mm512_set1_ps(0.01f);
  __m512 nw[2 * nr];
  for (int j = 0; j < nr; ++j) {
    float* wj = w + std::size_t(j) * ldw; float* vj = v + std::size_t(j) * ldw;
    for (int h = 0; h < 2; ++h) {
      __m512 g = _mm512_mul_ps(s, h ? bottom[j] : top[j]);
      __m512 vv = _mm512_fmsub_ps(mu, _mm512_loadu_ps(vj + 16 * h), _mm512_mul_ps(lr, g));
      __m512 ww = _mm512_add_ps(_mm512_loadu_ps(wj + 16 * h), vv);
      _mm512_storeu_ps(vj + 16 * h, vv); _mm512_storeu_ps(wj + 16 * h, ww);
      __m256bh hb = _mm512_cvtneps_pbh(ww);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(halves + std::size_t(j) * ldw + 16 * h), reinterpret_cast<__m256i&>(hb));
      nw[2 * j + h] = ww;
    }
  }
  // packed copy: pairs of columns (j, j+1) interleaved, 32 rows: 64 words per pair, streamed
  __m512i const low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5,
                                       36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  __m512i const high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
  for (int q = 0; q < 4; ++q) {
    __m512bh f = _mm512_cvtne2ps_pbh(nw[4 * q + 1], nw[4 * q]), g2 = _mm512_cvtne2ps_pbh(nw[4 * q + 3], nw[4 * q + 2]);
    __m512i first = reinterpret_cast<__m512i&>(f), second = reinterpret_cast<__m512i&>(g2);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(packed + 64 * q), _mm512_permutex2var_epi16(first, low, second));
    _mm512_stream_si512(reinterpret_cast<__m512i*>(packed + 64 * q + 32), _mm512_permutex2var_epi16(first, high, second));
  }
}
void run(benchmark::State& state, int mode) {
  int const n = 512;
  std::vector<bf16> a(std::size_t(M) * K, bf16(0.001f)), b(std::size_t(K) * n, bf16(0.001f));
  std::vector<bf16> pa(gemm::packed_a_size(M, K)), pb(gemm::packed_b_size(K, n));
  gemm::pack_a(pa.data(), gemm::Factor<bf16>{a.data(), M, false}, M, K);
  std::vector<Set> sets(SETS);
  for (auto& s : sets) { s.w.assign(std::size_t(M) * n, 0.1f); s.v.assign(s.w.size(), 0.f); s.g.assign(s.w.size(), 0.f);
    s.halves.resize(s.w.size()); s.packed.resize(gemm::packed_a_size(M, n)); }
  // b = x^T (k x n), x is n x k column-major... use transposed factor like Dense: op(b) = x^T
  gemm::Factor<bf16> bf{b.data(), n, true};
  int it = 0;
  for (auto _ : state) {
    Set& s = sets[it++ % SETS];
    auto cols = gemm::columns_of(bf, K, n, pb.data());
    if (mode == 0) {
      gemm::multiply(pa.data(), cols, M, n, K, 1.f, 0.f, s.g.data(), M);
    } else if (mode == 1) {
      gemm::multiply(pa.data(), cols, M, n, K, 1.f, 0.f, s.g.data(), M);
      update(s, 0, s.w.size(), n, 1.f / 256);
    } else if (mode == 4) {
      auto const* pa16 = reinterpret_cast<std::uint16_t const*>(pa.data());
      auto const* pb16 = reinterpret_cast<std::uint16_t const*>(cols.data);
      for (int j0 = 0; j0 < n; j0 += 8)
        for (int i0 = 0; i0 < M; i0 += 32) {
          std::size_t const at = std::size_t(j0) * M + i0;
          tile_update(K / 2, pa16 + gemm::pair_offset(32, K, i0, 0), pb16 + gemm::pair_offset(8, K, j0, 0), 1.f / 256,
                      s.w.data() + at, s.v.data() + at, reinterpret_cast<std::uint16_t*>(s.halves.data()) + at,
                      reinterpret_cast<std::uint16_t*>(s.packed.data()) + gemm::pair_offset(32, n, i0, j0 / 2), M);
        }
      _mm_sfence();
    } else {
      for (int j0 = 0; j0 < n; j0 += 8) {
        if (mode == 3 && j0 + 8 < n) {
          std::size_t const nb = std::size_t(j0 + 8) * M;
          for (std::size_t i = 0; i < std::size_t(8) * M; i += 16) {
            _mm_prefetch(reinterpret_cast<char const*>(&s.w[nb + i]), _MM_HINT_T1);
            _mm_prefetch(reinterpret_cast<char const*>(&s.v[nb + i]), _MM_HINT_T1);
            if (i % 32 == 0) _mm_prefetch(reinterpret_cast<char const*>(&s.halves[nb + i]), _MM_HINT_ET1);
          }
        }
        gemm::ColumnPairs c2 = cols; c2.data = cols.data + gemm::pair_offset(8, K, j0, 0);
        gemm::multiply(pa.data(), c2, M, 8, K, 1.f, 0.f, s.g.data() + std::size_t(j0) * M, M);
        update(s, std::size_t(j0) * M, std::size_t(8) * M, n, 1.f / 256);
      }
    }
    benchmark::DoNotOptimize(s.w.data());
  }
}
BENCHMARK_CAPTURE(run, product_only, 0)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK_CAPTURE(run, product_then_update, 1)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK_CAPTURE(run, update_per_8_columns, 2)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK_CAPTURE(run, update_per_8_columns_prefetch, 3)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK_CAPTURE(run, update_in_tile_epilogue, 4)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK_MAIN();
