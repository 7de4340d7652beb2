// What monitoring costs: one epoch of fit (10 steps of the step benchmark's MLP
// 784-1024-1024-10, global batch 256, Mirrored<2>, Fashion-MNIST) without any profiling
// callback, with a Profiler, and with a Profiler, a TraceWriter and a TensorBoard callback;
// evaluate over the same 10 batches without and with a Profiler; and a custom loop of the
// same 10 steps (Strategy::run: forward, backward, all-reduce of the gradients) without and
// with a LoopProfiler; and (where ZeroMQ is found) one epoch of Trainer<ParameterServer<2, 1>>
// (staleness 1: the two workers overlap) without and with a Profiler. The budget is
// 1% of the plain run; scripts and figures in docs/benchmarks.md.
//
//   profile_overhead --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true

#include <benchmark/benchmark.h>

#include <filesystem>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include <strata.hpp>
#include <strata/tensorboard.hpp>
#ifdef STRATA_BENCH_PS
#include <strata/ps.hpp>
#endif

#include "mlp_step.hpp"

namespace {

strata::Dataset const& epoch_data() {
  static auto const data = strata::data::fashion_mnist(strata::data::Split::train).take(10 * batch_size);
  return data;
}

// `make_callbacks()` gives each epoch's fresh callbacks, as a tuple.
template <class Trainer, class MakeCallbacks>
void fit_epoch_on(Trainer& trainer, benchmark::State& state, MakeCallbacks make_callbacks) {
  Model model(1);
  strata::FitOptions const options{.epochs = 1, .batch_size = batch_size, .shuffle = false};
  for (auto _ : state) {
    auto callbacks = make_callbacks();
    std::apply([&](auto&... cs) { trainer.fit(model, optimizer, strata::SoftmaxCrossEntropy{}, epoch_data(), options, cs...); },
               callbacks);
  }
  state.counters["samples_per_second"] =
      benchmark::Counter(double(state.iterations()) * double(epoch_data().size()), benchmark::Counter::kIsRate);
}

template <class MakeCallbacks>
void fit_epoch(benchmark::State& state, MakeCallbacks make_callbacks) {
  strata::Trainer<strata::Mirrored<2>> trainer;
  fit_epoch_on(trainer, state, make_callbacks);
}

void plain(benchmark::State& state) {
  fit_epoch(state, [] { return std::tuple<>{}; });
}
void profiler(benchmark::State& state) {
  fit_epoch(state, [] { return std::make_tuple(strata::Profiler({.summary = false})); });
}
void everything(benchmark::State& state) {
  auto const dir = std::filesystem::temp_directory_path() / "strata_profile_overhead";
  fit_epoch(state, [&] {
    return std::make_tuple(strata::Profiler({.summary = false}), strata::TraceWriter{dir / "trace.json"},
                           strata::TensorBoard{dir / "logs"});
  });
}

#ifdef STRATA_BENCH_PS
// Each epoch starts its cluster (server and worker threads, sockets) anew, profiled or not.
using PsTrainer = strata::Trainer<strata::ParameterServer<2, 1>>;
void ps_plain(benchmark::State& state) {
  PsTrainer trainer({.staleness = 1});
  fit_epoch_on(trainer, state, [] { return std::tuple<>{}; });
}
void ps_profiler(benchmark::State& state) {
  PsTrainer trainer({.staleness = 1});
  fit_epoch_on(trainer, state, [] { return std::make_tuple(strata::Profiler({.summary = false})); });
}
#endif

void evaluate(benchmark::State& state, bool profiled) {
  Model const model(1);
  strata::Trainer<strata::Mirrored<2>> trainer;
  for (auto _ : state) {
    if (profiled)
      benchmark::DoNotOptimize(trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, epoch_data(), batch_size,
                                                strata::Profiler({.summary = false})));
    else
      benchmark::DoNotOptimize(trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, epoch_data(), batch_size));
  }
  state.counters["samples_per_second"] =
      benchmark::Counter(double(state.iterations()) * double(epoch_data().size()), benchmark::Counter::kIsRate);
}
void evaluate_plain(benchmark::State& state) { evaluate(state, false); }
void evaluate_profiler(benchmark::State& state) { evaluate(state, true); }

// A custom loop's epoch: each replica's forward and backward of its shard, the gradients
// summed over the replicas (the update is left out: the same work either way).
void custom_loop(benchmark::State& state, bool profiled) {
  using Backend = strata::CpuBackend;
  Model model(1);
  strata::Strategy<strata::Mirrored<2>> strategy;
  std::vector<Model::Workspace<Backend>> workspaces;
  std::vector<strata::AlignedBuffer> gradients;
  for (int r = 0; r < 2; ++r) {
    workspaces.emplace_back(batch_size / 2);
    gradients.emplace_back(Model::arena_size);
  }
  auto const batches = epoch_data().batch(batch_size);
  auto step = [&](strata::ReplicaContext& ctx, strata::Shard const& shard) {
    auto& workspace = workspaces[std::size_t(ctx.replica_id_in_sync_group())];
    float* grads = gradients[std::size_t(ctx.replica_id_in_sync_group())].data();
    model.forward<Backend>(workspace, model.parameters().data(), shard.features, {.training = true});
    double const loss = strata::SoftmaxCrossEntropy{}.forward_backward<Backend>(
        workspace.output(), shard.targets, workspace.output_gradient(), 1.0f / float(shard.global_batch_size));
    model.backward<Backend>(workspace, model.parameters().data(), grads, shard.features, false);
    ctx.all_reduce(std::span<float>(grads, Model::arena_size), strata::ReduceOp::sum);
    return loss;
  };
  for (auto _ : state) {
    std::optional<strata::LoopProfiler<strata::Strategy<strata::Mirrored<2>>>> loop;
    if (profiled) loop.emplace(strategy);
    for (auto const& batch : strategy.distribute(batches)) {
      if (!loop) {
        benchmark::DoNotOptimize(strategy.run(step, batch));
        continue;
      }
      auto const timed = loop->step();
      benchmark::DoNotOptimize(strategy.run(step, batch));
    }
    if (loop) loop->finish(strata::Profiler({.summary = false}));
  }
  state.counters["samples_per_second"] =
      benchmark::Counter(double(state.iterations()) * double(epoch_data().size()), benchmark::Counter::kIsRate);
}
void custom_loop_plain(benchmark::State& state) { custom_loop(state, false); }
void custom_loop_profiled(benchmark::State& state) { custom_loop(state, true); }

}  // namespace

BENCHMARK(custom_loop_plain)->Name("CustomLoop/plain")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(custom_loop_profiled)->Name("CustomLoop/LoopProfiler")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(evaluate_plain)->Name("Evaluate/plain")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(evaluate_profiler)->Name("Evaluate/Profiler")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(plain)->Name("Fit/plain")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(profiler)->Name("Fit/Profiler")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(everything)->Name("Fit/Profiler+TraceWriter+TensorBoard")->Unit(benchmark::kMillisecond)->UseRealTime();
#ifdef STRATA_BENCH_PS
BENCHMARK(ps_plain)->Name("ParameterServer/plain")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(ps_profiler)->Name("ParameterServer/Profiler")->Unit(benchmark::kMillisecond)->UseRealTime();
#endif
BENCHMARK_MAIN();
