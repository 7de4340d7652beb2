// Mixed precision and gradient accumulation on the CPU, for the MLP 784-1024-1024-10:
//   Step/<precision>/<strategy>     one training step at global batch 256 (SGD with momentum)
//   Accumulate/<K>/Mirrored2        one micro-batch of 256 under GradAccum<K>, with the gradient
//                                   bytes reduced per optimizer step and per sample
//   Activations/<type>/batch1024    the bytes a replica's workspace keeps for backward at batch
//                                   1024: what the workspace reports, and the memory allocated
//                                   while one is built (malloc's, from mallinfo2, and strata's
//                                   own mappings, from /proc/self/statm)
// Run: build/benchmarks/precision --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

#include <benchmark/benchmark.h>

#include <strata.hpp>

#include "config_step.hpp"

namespace {

template <class... Policies>
void step(benchmark::State& state) {
  config_step<strata::policy::Config<Policies...>>(state);
}

using strata::Mirrored;
using strata::OneDevice;
BENCHMARK_TEMPLATE(step, OneDevice, strata::FullPrecision)->Name("Step/fp32/OneDevice")->UseRealTime();
BENCHMARK_TEMPLATE(step, OneDevice, strata::MixedPrecision)->Name("Step/bf16/OneDevice")->UseRealTime();
BENCHMARK_TEMPLATE(step, OneDevice, strata::MixedPrecisionFp16)->Name("Step/fp16/OneDevice")->UseRealTime();
BENCHMARK_TEMPLATE(step, Mirrored<2>, strata::FullPrecision)->Name("Step/fp32/Mirrored2")->UseRealTime();
BENCHMARK_TEMPLATE(step, Mirrored<2>, strata::MixedPrecision)->Name("Step/bf16/Mirrored2")->UseRealTime();
BENCHMARK_TEMPLATE(step, Mirrored<2>, strata::MixedPrecisionFp16)->Name("Step/fp16/Mirrored2")->UseRealTime();
BENCHMARK_TEMPLATE(step, Mirrored<2>, strata::GradAccum<1>)->Name("Accumulate/1/Mirrored2")->UseRealTime();
BENCHMARK_TEMPLATE(step, Mirrored<2>, strata::GradAccum<8>)->Name("Accumulate/8/Mirrored2")->UseRealTime();

// Bytes allocated: malloc's in use, and every mapping outside malloc's heap (strata maps its
// arrays of 2 MiB or more itself, core/aligned_buffer.hpp): the process's virtual size less
// the heap malloc grew with sbrk.
std::size_t allocated_bytes() {
  std::size_t pages = 0;
  if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%zu", &pages) != 1) pages = 0;
    std::fclose(statm);
  }
  struct mallinfo2 const m = mallinfo2();
  return m.uordblks + pages * std::size_t(sysconf(_SC_PAGESIZE)) - m.arena;
}

template <class T>
void activations(benchmark::State& state) {
  constexpr int batch = 1024;
  std::size_t reported = 0, total = 0, allocated = 0;
  for (auto _ : state) {
    std::size_t const before = allocated_bytes();
    Model::Workspace<strata::CpuBackend, T> workspace(batch);
    allocated = allocated_bytes() - before;
    reported = workspace.activation_bytes();
    total = workspace.bytes();
    benchmark::DoNotOptimize(workspace);
  }
  state.counters["activation_MB"] = double(reported) * 1e-6;
  state.counters["workspace_MB"] = double(total) * 1e-6;
  state.counters["allocated_MB"] = double(allocated) * 1e-6;
}
BENCHMARK_TEMPLATE(activations, float)->Name("Activations/fp32/batch1024");
BENCHMARK_TEMPLATE(activations, strata::bf16)->Name("Activations/bf16/batch1024");
BENCHMARK_TEMPLATE(activations, strata::fp16)->Name("Activations/fp16/batch1024");

}  // namespace

BENCHMARK_MAIN();
