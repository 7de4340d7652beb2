// How much of the gradient all-reduce hides behind the backward pass: one training step
// (forward, loss, backward, gradient all-reduce) of a 10-layer MLP (784-1024x9-10, ReLU,
// 9.3 M parameters, 36 MiB of gradients) on 2 replica threads, batch 16 per replica:
//   Step/backward_only     no communication: the compute a step needs
//   AllReduce/gradients    the all-reduce of the whole gradient arena alone
//   Step/after_backward    backward, then every bucket (Overlap::after_backward)
//   Step/inline_buckets    a bucket is reduced on the replica thread when complete
//   Step/overlapped        a bucket is handed to a communication thread (Overlap::comm_thread)
// Argument: bucket bytes. hidden = (after_backward - overlapped) / all-reduce alone is the
// fraction of communication hidden; scripts/overlap_table.py computes it from the JSON.
// `.../mixed`: the same under mixed precision (bf16 activations), whose backward also hands
// each layer to the buckets as soon as it is final.
//
//   overlap [--benchmark_repetitions=5 --benchmark_format=json]

#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "strata.hpp"

namespace {
using namespace strata;
using D = nn::Dense<1024, 1024>;
using Model = Sequential<Dense<784, 1024>, Relu, D, Relu, D, Relu, D, Relu, D, Relu, D, Relu, D, Relu, D, Relu, D,
                         Relu, Dense<1024, 10>>;
constexpr int replicas = 2;
constexpr int batch = 16;

template <class T>
struct Replica {
  Model::Workspace<CpuBackend, T> workspace{batch};
  AlignedBuffer gradients{Model::arena_size};
  Matrix x = Matrix::Random(784, batch);
  Matrix y = Matrix::Zero(1, batch);
};

template <class T>
struct World {
  Model model{1};
  comm::ThreadGroup group{replicas};
  std::vector<std::unique_ptr<Replica<T>>> replicas_;
  World() {
    for (int r = 0; r < replicas; ++r) {
      replicas_.push_back(std::make_unique<Replica<T>>());
      for (int i = 0; i < batch; ++i) replicas_.back()->y(0, i) = float((i + r) % 10);
    }
  }
};
template <class T>
World<T>& world() {
  static World<T> w;
  return w;
}

template <class T, class PerRank>
void on_threads(benchmark::State& state, PerRank body) {
  auto task = [&](int rank) {
    if (rank == 0)
      for (auto _ : state) body(rank);
    else
      for (benchmark::IterationCount i = 0; i < state.max_iterations; ++i) body(rank);
  };
  world<T>().group.run(task);
}

template <class T, class LayerDone>
void forward_backward(Replica<T>& r, LayerDone done) {
  Model const& m = world<T>().model;
  m.forward<CpuBackend>(r.workspace, m.parameters().data(), view(r.x), {.training = true});
  SoftmaxCrossEntropy{}.forward_backward<CpuBackend>(r.workspace.output(), view(r.y), r.workspace.output_gradient(),
                                                     1.0f / float(batch * replicas));
  m.backward<CpuBackend>(r.workspace, m.parameters().data(), r.gradients.data(), view(r.x), false, done);
}

template <class T>
void backward_only(benchmark::State& state) {
  on_threads<T>(state, [](int rank) {
    forward_backward(*world<T>().replicas_[std::size_t(rank)], [](std::size_t) {});
    world<T>().group.barrier(rank);
  });
}

void all_reduce_alone(benchmark::State& state) {
  on_threads<float>(state, [](int rank) {
    world<float>().group.communicator(rank).all_reduce(world<float>().replicas_[std::size_t(rank)]->gradients.span(),
                                                       comm::ReduceOp::sum);
  });
}

template <comm::Overlap overlap, class T>
void step(benchmark::State& state) {
  std::vector<comm::ThreadCommunicator> comms;
  std::vector<std::unique_ptr<comm::BucketedAllReduce<comm::ThreadCommunicator>>> syncs;
  for (int r = 0; r < replicas; ++r) comms.push_back(world<T>().group.communicator(r));
  for (int r = 0; r < replicas; ++r)
    syncs.push_back(std::make_unique<comm::BucketedAllReduce<comm::ThreadCommunicator>>(
        comms[std::size_t(r)], comm::BucketPlan(Model::offsets, std::size_t(state.range(0))),
        world<T>().replicas_[std::size_t(r)]->gradients.span(), comm::ReduceOp::sum, overlap));
  on_threads<T>(state, [&](int rank) {
    auto& sync = *syncs[std::size_t(rank)];
    forward_backward(*world<T>().replicas_[std::size_t(rank)], [&](std::size_t layer) { sync.layer_done(layer); });
    sync.finish();
  });
  state.counters["buckets"] = double(syncs[0]->plan().buckets().size());
}

BENCHMARK(all_reduce_alone)->Name("AllReduce/gradients")->UseRealTime()->Unit(benchmark::kMillisecond);

// The Step rows of one precision, their names ending in `suffix`.
template <class T>
int register_steps(std::string const& suffix) {
  auto in_ms = [](benchmark::internal::Benchmark* b) { return b->UseRealTime()->Unit(benchmark::kMillisecond); };
  in_ms(benchmark::RegisterBenchmark(("Step/backward_only" + suffix).c_str(), backward_only<T>));
  struct Mode {
    char const* name;
    void (*run)(benchmark::State&);
    bool large_buckets_too;
  };
  for (Mode const& mode : {Mode{"Step/after_backward", step<comm::Overlap::after_backward, T>, false},
                           Mode{"Step/inline_buckets", step<comm::Overlap::in_backward, T>, true},
                           Mode{"Step/overlapped", step<comm::Overlap::comm_thread, T>, true}}) {
    auto* b = in_ms(benchmark::RegisterBenchmark((mode.name + suffix).c_str(), mode.run))->Arg(4 << 20);
    if (mode.large_buckets_too) b->Arg(25 << 20);
  }
  return 0;
}
int const registered = register_steps<float>("") + register_steps<bf16>("/mixed");
}  // namespace

BENCHMARK_MAIN();
