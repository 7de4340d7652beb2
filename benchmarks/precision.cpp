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

#include "mlp_step.hpp"

namespace {

template <class... Policies>
void step(benchmark::State& state) {
  using Config = strata::policy::Config<Policies...>;
  Model model(1);
  strata::strategy::BasicStrategy<Config> strategy;
  ConfigRunner<Config> runner(strategy, model, optimizer, {}, batch_size, 0);
  auto const& batch = real_batch();
  for (auto _ : state) benchmark::DoNotOptimize(runner.train_on_batch(batch));
  state.counters["samples_per_second"] =
      benchmark::Counter(double(batch_size), benchmark::Counter::kIsIterationInvariantRate);
  if (runner.optimizer_steps() > 0) {
    double const bytes = double(runner.floats_reduced()) * sizeof(float);
    state.counters["reduced_MB_per_step"] = bytes / double(runner.optimizer_steps()) * 1e-6;
    double const samples = double(runner.optimizer_steps()) * Config::accumulation_steps * batch_size;  // in complete groups
    state.counters["reduced_bytes_per_sample"] = bytes / samples;
  }
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
