#pragma once
// One training step of the benchmarked MLP under a resolved policy Config, timed per
// iteration (one micro-batch), with samples/s and the gradient bytes the runner reduced:
// shared by benchmarks/precision and benchmarks/configs.

#include <benchmark/benchmark.h>

#include <strata.hpp>

#include "mlp_step.hpp"

namespace {

template <class Config>
void config_step(benchmark::State& state) {
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
    double const samples = double(runner.optimizer_steps()) * Config::accumulation_steps * batch_size;  // complete groups
    state.counters["reduced_bytes_per_sample"] = bytes / samples;
  }
}

}  // namespace
