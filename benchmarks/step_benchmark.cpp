// One training step of the MLP 784-1024-1024-10 (ReLU, softmax cross-entropy, SGD with
// momentum) at global batch 256 on Fashion-MNIST:
//   Trainer/OneDevice   strata's generated step, one replica
//   HandWritten/Eigen   the same arithmetic written by hand with Eigen (the zero-overhead yardstick)
//   Trainer/Mirrored2   strata's step on two replica threads
//   GemmOnly/threads/N  only the GEMMs of one replica's step at batch 256/N, on N threads at once:
//                       the machine's GEMM rate for exactly this step's shapes
// Run: build/benchmarks/step_benchmark --benchmark_repetitions=7 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <strata.hpp>

#include "mlp_step.hpp"

namespace {

void report(benchmark::State& state, int samples_per_iteration) {
  state.counters["samples_per_second"] =
      benchmark::Counter(double(samples_per_iteration), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP_per_second"] = benchmark::Counter(flops_per_sample * samples_per_iteration * 1e-9,
                                                          benchmark::Counter::kIsIterationInvariantRate);
}

template <class Trainer>
void trainer_step(benchmark::State& state) {
  Model model(1);
  Trainer trainer;
  Runner<Trainer> runner(
      trainer.strategy(), model, optimizer, {}, batch_size, 0);
  auto const& batch = real_batch();
  for (auto _ : state) benchmark::DoNotOptimize(runner.train_on_batch(batch));
  report(state, batch_size);
}
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::OneDevice>)->Name("Trainer/OneDevice")->UseRealTime();
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::Mirrored<2>>)->Name("Trainer/Mirrored2")->UseRealTime();

void hand_written_step(benchmark::State& state) {
  HandWritten net;
  auto const& batch = real_batch();
  Eigen::Map<Eigen::MatrixXf const> x(batch.features.data, 784, batch_size);
  for (auto _ : state) benchmark::DoNotOptimize(net.step(x, batch.targets.data));
  report(state, batch_size);
}
BENCHMARK(hand_written_step)->Name("HandWritten/Eigen")->UseRealTime();

// Only the eight GEMMs of a replica's step (3 forward, 3 weight gradients, 2 input gradients),
// at the replica's share of the batch, on N threads at once (plain std::threads kept alive
// in a strata ThreadGroup, whose dispatch costs microseconds against GEMMs of milliseconds).
void gemm_only(benchmark::State& state) {
  int const threads = int(state.range(0));
  int const per_replica = batch_size / threads;
  struct Gemms {
    Eigen::MatrixXf w1 = Eigen::MatrixXf::Random(1024, 784), w2 = Eigen::MatrixXf::Random(1024, 1024),
                    w3 = Eigen::MatrixXf::Random(10, 1024);
    Eigen::MatrixXf x, h1, h2, z, d2, d1, g1 = Eigen::MatrixXf(1024, 784), g2 = Eigen::MatrixXf(1024, 1024),
                                           g3 = Eigen::MatrixXf(10, 1024);
    explicit Gemms(int n)
        : x(Eigen::MatrixXf::Random(784, n)), h1(1024, n), h2(1024, n), z(10, n), d2(1024, n), d1(1024, n) {}
    void run() {
      h1.noalias() = w1 * x;
      h2.noalias() = w2 * h1;
      z.noalias() = w3 * h2;
      g3.noalias() = z * h2.transpose();
      d2.noalias() = w3.transpose() * z;
      g2.noalias() = d2 * h1.transpose();
      d1.noalias() = w2.transpose() * d2;
      g1.noalias() = d1 * x.transpose();
    }
  };
  std::vector<Gemms> work;
  for (int t = 0; t < threads; ++t) work.emplace_back(per_replica);
  strata::comm::ThreadGroup group(threads);
  auto task = [&](int rank) { work[std::size_t(rank)].run(); };
  for (auto _ : state) {
    group.run(task);
    benchmark::ClobberMemory();
  }
  report(state, per_replica * threads);
}
BENCHMARK(gemm_only)->Name("GemmOnly/threads")->Arg(1)->Arg(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
