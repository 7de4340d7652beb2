// The arithmetic peak of this machine's cores, the ceiling every GEMM figure in
// docs/benchmarks.md is a share of:
//   Peak/fp32_fma/avx2         8-lane fused multiply-adds: the float peak of Zen 3 and of
//                              Zen 4, which runs a 16-lane one as two 8-lane halves (an
//                              AVX-512 loop measured the same, docs/benchmarks.md)
//   Peak/fp32_fma/avx512       16-lane fused multiply-adds (skipped without AVX-512): the
//                              float peak of Zen 5, whose AVX-512 units are full width
//   Peak/bf16_dot/avx512       VDPBF16PS, 32 bf16 products summed into 16 floats (skipped
//                              without AVX512_BF16): what oneDNN's bf16 matmul runs on
//                              where there is no AMX, and strata's own bf16 kernel
//   Peak/bf16_amx              TDPBF16PS, a 16x32 by 32x16 bf16 tile product summed into a
//                              16x16 float tile (skipped without AMX-BF16): what oneDNN's
//                              bf16 matmul runs on Intel Sapphire Rapids and later
// on one thread and on two, each with twelve independent accumulators, so the loop is bound
// by the multiply units and not by an instruction's latency. FLOP counts a multiply and an
// add as two, as GEMM rates do. And the memory's ceiling for the update of a step:
//   Memory/sgd_momentum        m = 0.9 m + g, w -= 0.01 m over the MLP step's 1,863,690
//                              parameters, cold (as after a step's products): 20 bytes a
//                              parameter, reported as bytes per second
// Run: build/benchmarks/cpu_peak --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

namespace {

constexpr int accumulators = 12;
constexpr long rounds_per_iteration = 1 << 16;

// Each kernel runs `rounds_per_iteration` rounds of one instruction per accumulator and
// returns a lane of their sum, so nothing is optimised away. The asm barrier keeps the compiler
// from hoisting a loop-invariant result out of the loop.
__attribute__((target("avx2,fma"), noinline)) float fma_avx2() {
  __m256 acc[accumulators];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  __m256 x = _mm256_set1_ps(1.0f);
  __m256 const y = _mm256_set1_ps(1e-9f);
  for (long r = 0; r < rounds_per_iteration; ++r) {
#pragma GCC unroll 12
    for (__m256& a : acc) a = _mm256_fmadd_ps(x, y, a);
    __asm__ volatile("" : "+x"(x));
  }
  __m256 s = acc[0];
  for (int j = 1; j < accumulators; ++j) s = _mm256_add_ps(s, acc[j]);
  return _mm256_cvtss_f32(s);
}

// The 16-lane kernels: a 16-lane FMA (AVX-512; Zen 4 runs it as two 8-lane halves, Zen 5 at
// once) or VDPBF16PS (AVX512_BF16). Compiled for both instruction sets, each runs only where
// its own exists (peak() asks the CPU first).
enum class Wide { fp32_fma, bf16_dot };

template <Wide W>
__attribute__((target("avx512f,avx512bf16"), noinline)) float avx512_loop() {
  constexpr bool fp32 = W == Wide::fp32_fma;
  __m512 acc[accumulators];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  // fp32: 1.0 times a tiny float; bf16: pairs of bf16 1.0 times a small bf16. The sums stay finite.
  __m512 x = fp32 ? _mm512_set1_ps(1.0f) : _mm512_castsi512_ps(_mm512_set1_epi16(0x3f80));
  __m512 const y = fp32 ? _mm512_set1_ps(1e-9f) : _mm512_castsi512_ps(_mm512_set1_epi16(0x3000));
  for (long r = 0; r < rounds_per_iteration; ++r) {
#pragma GCC unroll 12
    for (__m512& a : acc) {
      if constexpr (fp32) a = _mm512_fmadd_ps(x, y, a);
      else a = _mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)y);
    }
    __asm__ volatile("" : "+v"(x));
  }
  __m512 s = acc[0];
  for (int j = 1; j < accumulators; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_cvtss_f32(s);
}

// AMX: four accumulator tiles, each the sum of one pair of the four source tiles, so four
// independent tile products are in flight, as in oneDNN's kernels. Linux hands a process
// the tile registers' state only once it asks (ARCH_REQ_XCOMP_PERM for XTILEDATA).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14]{};
  std::uint16_t bytes_per_row[16]{};
  std::uint8_t rows[16]{};
};

bool amx_usable() {
  constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("amx-bf16") &&
         syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
}

constexpr long amx_instructions_per_round = 4;

__attribute__((target("amx-tile,amx-bf16"), noinline)) float amx_loop() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.bytes_per_row[t] = 64;
  _tile_loadconfig(&config);
  // bf16 1.0 and a small bf16, so the sums stay finite.
  alignas(64) std::uint16_t ones[16 * 32], small[16 * 32];
  std::fill_n(ones, 16 * 32, std::uint16_t{0x3f80});
  std::fill_n(small, 16 * 32, std::uint16_t{0x3000});
  alignas(64) float out[16 * 16];
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, small, 64);
  _tile_loadd(6, small, 64);
  _tile_loadd(7, ones, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (long r = 0; r < rounds_per_iteration / 8; ++r) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 6, 5);
    _tile_dpbf16ps(3, 6, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

template <float (*Kernel)(), int FlopsPerInstruction>
void peak(benchmark::State& state, char const* feature, bool supported) {
  if (!supported) {
    state.SkipWithError((std::string("skipped: this CPU has no ") + feature).c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(Kernel());
  double const flops = double(state.iterations()) * rounds_per_iteration * accumulators * FlopsPerInstruction;
  state.counters["FLOP"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);  // printed as G/s
}

void fp32_fma_avx2(benchmark::State& state) {
  peak<fma_avx2, 8 * 2>(state, "AVX2 with FMA", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
}
void fp32_fma_avx512(benchmark::State& state) {
  peak<avx512_loop<Wide::fp32_fma>, 16 * 2>(state, "AVX-512", __builtin_cpu_supports("avx512f"));
}
void bf16_dot_avx512(benchmark::State& state) {
  peak<avx512_loop<Wide::bf16_dot>, 32 * 2>(state, "AVX512_BF16", __builtin_cpu_supports("avx512bf16"));
}
void bf16_amx(benchmark::State& state) {
  static bool const usable = amx_usable();
  if (!usable) {
    state.SkipWithError("skipped: this CPU has no AMX-BF16 (or Linux refused the tile state)");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(amx_loop());
  // rounds_per_iteration / 8 rounds of four tile products, each 16 x 16 x 32 multiply-adds.
  double const flops = double(state.iterations()) * double(rounds_per_iteration / 8) * amx_instructions_per_round *
                       16 * 16 * 32 * 2;
  state.counters["FLOP"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
}

// Threads(2): both threads run the loop at once and the rates add up (Google Benchmark sums
// a rate counter over threads).
BENCHMARK(fp32_fma_avx2)->Name("Peak/fp32_fma/avx2")->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(fp32_fma_avx512)->Name("Peak/fp32_fma/avx512")->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(bf16_dot_avx512)->Name("Peak/bf16_dot/avx512")->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(bf16_amx)->Name("Peak/bf16_amx")->Threads(1)->Threads(2)->UseRealTime();

// Each thread updates its share of the parameters. Iterations take four sets of weights,
// momentum and gradient in turn (90 MB, almost three times the L3 of a Zen 3 or Zen 4
// chiplet), so the set an iteration takes was evicted by the three before it.
void sgd_momentum(benchmark::State& state) {
  constexpr std::size_t parameters = 1863690;  // Dense<784, 1024>, Dense<1024, 1024>, Dense<1024, 10>
  struct Set {
    std::vector<float> w = std::vector<float>(parameters, 1.0f), m = std::vector<float>(parameters, 0.5f),
                       g = std::vector<float>(parameters, 0.25f);
  };
  static std::vector<Set> sets(4);
  std::size_t const threads = std::size_t(state.threads()), t = std::size_t(state.thread_index());
  std::size_t const begin = parameters * t / threads, end = parameters * (t + 1) / threads;
  std::size_t next = 0;
  for (auto _ : state) {
    Set& s = sets[next++ % sets.size()];
    float* __restrict w = s.w.data();
    float* __restrict m = s.m.data();
    float const* __restrict g = s.g.data();
    for (std::size_t i = begin; i < end; ++i) {
      m[i] = 0.9f * m[i] + g[i];
      w[i] -= 0.01f * m[i];
    }
    benchmark::ClobberMemory();
  }
  state.counters["bytes"] =  // summed over the threads: the machine's rate
      benchmark::Counter(double(state.iterations()) * double(end - begin) * 5 * sizeof(float), benchmark::Counter::kIsRate);
}
BENCHMARK(sgd_momentum)->Name("Memory/sgd_momentum")->Threads(1)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
