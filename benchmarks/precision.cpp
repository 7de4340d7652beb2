// Mixed precision and gradient accumulation on the CPU, for the MLP 784-1024-1024-10:
//   Step/<precision>/<strategy>     one training step at global batch 256 (SGD with momentum)
//   Accumulate/<K>/Mirrored2        one micro-batch of 256 under GradAccum<K>, with the gradient
//                                   bytes reduced per optimizer step and per sample
//   Activations/<type>/batch1024    the bytes a replica's workspace keeps for backward at batch
//                                   1024: what the workspace reports, and the heap growth
//                                   glibc's mallinfo2 measures while one is built
// Run: build/benchmarks/precision --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <malloc.h>

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

template <class T>
void activations(benchmark::State& state) {
  constexpr int batch = 1024;
  std::size_t reported = 0, total = 0, heap = 0;
  for (auto _ : state) {
    std::size_t const before = mallinfo2().uordblks + mallinfo2().hblkhd;
    Model::Workspace<strata::CpuBackend, T> workspace(batch);
    heap = mallinfo2().uordblks + mallinfo2().hblkhd - before;
    reported = workspace.activation_bytes();
    total = workspace.bytes();
    benchmark::DoNotOptimize(workspace);
  }
  state.counters["activation_MB"] = double(reported) * 1e-6;
  state.counters["workspace_MB"] = double(total) * 1e-6;
  state.counters["heap_growth_MB"] = double(heap) * 1e-6;
}
BENCHMARK_TEMPLATE(activations, float)->Name("Activations/fp32/batch1024");
BENCHMARK_TEMPLATE(activations, strata::bf16)->Name("Activations/bf16/batch1024");
BENCHMARK_TEMPLATE(activations, strata::fp16)->Name("Activations/fp16/batch1024");

}  // namespace

BENCHMARK_MAIN();
