#pragma once
// What the two all-reduce benchmarks share: the sizes (4 KiB .. 256 MiB, as nccl-tests
// sweeps them), fixed iteration counts (so that every rank of an MPI run does the same
// number of collectives), the inputs, the correctness check and the counters.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace strata::bench {

inline constexpr std::int64_t smallest_bytes = 4 << 10;
inline constexpr std::int64_t largest_bytes = std::int64_t(256) << 20;

// About 1 GiB of payload per measurement, between 5 and 20,000 collectives.
inline benchmark::IterationCount iterations_for(std::int64_t bytes) {
  return std::clamp<std::int64_t>((std::int64_t(1) << 30) / bytes, 5, 20'000);
}

// Registers fn for every size, with fixed iterations; arguments: bytes.
template <class Fn>
void register_sizes(char const* name, Fn fn) {
  for (std::int64_t bytes = smallest_bytes; bytes <= largest_bytes; bytes *= 4)
    benchmark::RegisterBenchmark(name, fn)->Arg(bytes)->Iterations(iterations_for(bytes))->UseRealTime()->Unit(
        benchmark::kMicrosecond);
}

// Rank r's input: element i is (r + 1) + (i % 7); the sum over n ranks is exact in float.
inline void fill(std::span<float> data, int rank) {
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = float(rank + 1) + float(i % 7);
}
inline std::size_t count_wrong(std::span<float const> data, int ranks) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < data.size(); ++i)
    wrong += data[i] != float(ranks * (ranks + 1) / 2) + float(ranks) * float(i % 7);
  return wrong;
}

// nccl-tests' columns: algbw = bytes / time; busbw = algbw * 2(n-1)/n for all-reduce (the
// bytes each rank's link carries); wrong elements, checked after the timed loop.
inline void report(benchmark::State& state, std::int64_t bytes, int ranks, std::size_t wrong) {
  using benchmark::Counter;
  state.counters["algbw"] = Counter(double(bytes), Counter::kIsIterationInvariantRate, Counter::kIs1024);
  state.counters["busbw"] =
      Counter(double(bytes) * 2.0 * (ranks - 1) / ranks, Counter::kIsIterationInvariantRate, Counter::kIs1024);
  state.counters["ranks"] = ranks;
  state.counters["wrong"] = double(wrong);
}

}  // namespace strata::bench
