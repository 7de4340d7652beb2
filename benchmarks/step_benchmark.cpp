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

namespace {

constexpr int batch_size = 256;
using Model = strata::Sequential<strata::Dense<784, 1024>, strata::Relu, strata::Dense<1024, 1024>, strata::Relu,
                                 strata::Dense<1024, 10>>;
constexpr strata::Sgd optimizer{.lr = 0.01f, .momentum = 0.9f};

// Multiply-adds of one step, times 2: forward, weight gradients, input gradients (not of the first layer).
constexpr double flops_per_sample = 2.0 * (3.0 * (784.0 * 1024 + 1024.0 * 1024 + 1024.0 * 10) -
                                           784.0 * 1024);

strata::data::Batch const& real_batch() {
  static auto const data = strata::data::fashion_mnist(strata::data::Split::train).take(batch_size);
  static auto const stream = data.batch(batch_size).stream(0);
  static strata::data::Batch const* batch = stream->next();
  return *batch;
}

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
  strata::train::StepRunner<typename Trainer::config, Model, strata::Sgd, strata::SoftmaxCrossEntropy> runner(
      trainer.strategy(), model, optimizer, {}, batch_size, 0);
  auto const& batch = real_batch();
  for (auto _ : state) benchmark::DoNotOptimize(runner.train_on_batch(batch));
  report(state, batch_size);
}
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::OneDevice>)->Name("Trainer/OneDevice")->UseRealTime();
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::Mirrored<2>>)->Name("Trainer/Mirrored2")->UseRealTime();

// The same step by hand: Eigen expressions, preallocated buffers, the same update rule.
struct HandWritten {
  using M = Eigen::MatrixXf;
  using V = Eigen::VectorXf;
  M w1 = M::Random(1024, 784) * 0.05f, w2 = M::Random(1024, 1024) * 0.05f, w3 = M::Random(10, 1024) * 0.05f;
  V b1 = V::Zero(1024), b2 = V::Zero(1024), b3 = V::Zero(10);
  M gw1 = M::Zero(1024, 784), gw2 = M::Zero(1024, 1024), gw3 = M::Zero(10, 1024);
  V gb1 = V::Zero(1024), gb2 = V::Zero(1024), gb3 = V::Zero(10);
  M vw1 = M::Zero(1024, 784), vw2 = M::Zero(1024, 1024), vw3 = M::Zero(10, 1024);
  V vb1 = V::Zero(1024), vb2 = V::Zero(1024), vb3 = V::Zero(10);
  M h1 = M(1024, batch_size), h2 = M(1024, batch_size), z = M(10, batch_size);
  M d3 = M(10, batch_size), d2 = M(1024, batch_size), d1 = M(1024, batch_size);

  template <class W, class G, class Vel>
  static void momentum(W& w, G const& g, Vel& v, float scale) {
    v = optimizer.momentum * v - (optimizer.lr * scale) * g;
    w += v;
  }

  float step(Eigen::Map<M const> x, float const* labels) {
    h1.noalias() = w1 * x;
    h1 = (h1.colwise() + b1).cwiseMax(0.0f);
    h2.noalias() = w2 * h1;
    h2 = (h2.colwise() + b2).cwiseMax(0.0f);
    z.noalias() = w3 * h2;
    z.colwise() += b3;
    float loss = 0.0f;
    for (int j = 0; j < batch_size; ++j) {
      float const peak = z.col(j).maxCoeff();
      d3.col(j) = (z.col(j).array() - peak).exp();
      float const sum = d3.col(j).sum();
      int const label = int(labels[j]);
      loss += std::log(sum) + peak - z(label, j);
      d3.col(j) /= sum;
      d3(label, j) -= 1.0f;
    }
    gw3.noalias() = d3 * h2.transpose();
    gb3 = d3.rowwise().sum();
    d2.noalias() = w3.transpose() * d3;
    d2 = (h2.array() > 0.0f).select(d2, 0.0f);
    gw2.noalias() = d2 * h1.transpose();
    gb2 = d2.rowwise().sum();
    d1.noalias() = w2.transpose() * d2;
    d1 = (h1.array() > 0.0f).select(d1, 0.0f);
    gw1.noalias() = d1 * x.transpose();
    gb1 = d1.rowwise().sum();
    float const scale = 1.0f / float(batch_size);
    momentum(w1, gw1, vw1, scale), momentum(w2, gw2, vw2, scale), momentum(w3, gw3, vw3, scale);
    momentum(b1, gb1, vb1, scale), momentum(b2, gb2, vb2, scale), momentum(b3, gb3, vb3, scale);
    return loss;
  }
};

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
