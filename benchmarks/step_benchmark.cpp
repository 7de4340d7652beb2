// One training step of the MLP 784-1024-1024-10 (ReLU, softmax cross-entropy, SGD with
// momentum) at global batch 256 on Fashion-MNIST:
//   Trainer/OneDevice   strata's generated step, one replica, its GEMMs split over every core
//                       (intra-op threads, automatic)
//   Trainer/OneDevice/intra_op_1   the same on the replica's thread alone (intra_op_threads = 1)
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

template <class Trainer, int IntraOpThreads = 0>
void trainer_step(benchmark::State& state) {
  Model model(1);
  Trainer trainer({.intra_op_threads = IntraOpThreads});
  Runner<Trainer> runner(
      trainer.strategy(), model, optimizer, {}, batch_size, 0);
  auto const& batch = real_batch();
  for (auto _ : state) benchmark::DoNotOptimize(runner.train_on_batch(batch));
  report(state, batch_size);
}
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::OneDevice>)->Name("Trainer/OneDevice")->UseRealTime();
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::OneDevice>, 1)->Name("Trainer/OneDevice/intra_op_1")->UseRealTime();
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
// As in Mirrored<N>, the threads read one copy of the weights and write their own gradients.
void gemm_only(benchmark::State& state) {
  int const threads = int(state.range(0));
  int const per_replica = batch_size / threads;
  using M = Eigen::MatrixXf;
  M const w1 = M::Random(1024, 784) * 0.05f, w2 = M::Random(1024, 1024) * 0.05f, w3 = M::Random(10, 1024) * 0.05f;
  struct Replica {
    M x, h1, h2, z, d2, d1, g1 = M(1024, 784), g2 = M(1024, 1024), g3 = M(10, 1024);
    explicit Replica(int n) : x(M::Random(784, n)), h1(1024, n), h2(1024, n), z(10, n), d2(1024, n), d1(1024, n) {}
  };
  std::vector<Replica> replicas;
  for (int t = 0; t < threads; ++t) replicas.emplace_back(per_replica);
  auto task = [&](int rank) {
    Replica& r = replicas[std::size_t(rank)];
    r.h1.noalias() = w1 * r.x;
    r.h2.noalias() = w2 * r.h1;
    r.z.noalias() = w3 * r.h2;
    r.g3.noalias() = r.z * r.h2.transpose();
    r.d2.noalias() = w3.transpose() * r.z;
    r.g2.noalias() = r.d2 * r.h1.transpose();
    r.d1.noalias() = w2.transpose() * r.d2;
    r.g1.noalias() = r.d1 * r.x.transpose();
  };
  strata::comm::ThreadGroup group(threads);
  for (auto _ : state) {
    group.run(task);
    benchmark::ClobberMemory();
  }
  report(state, per_replica * threads);
}
BENCHMARK(gemm_only)->Name("GemmOnly/threads")->Arg(1)->Arg(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
