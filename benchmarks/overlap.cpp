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
//
//   overlap [--benchmark_repetitions=5 --benchmark_format=json]

#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "strata.hpp"

namespace {
using namespace strata;
using D = nn::Dense<1024, 1024>;
using Model = Sequential<Dense<784, 1024>, Relu, D, Relu, D, Relu, D, Relu, D, Relu, D, Relu, D, Relu, D, Relu, D,
                         Relu, Dense<1024, 10>>;
constexpr int replicas = 2;
constexpr int batch = 16;

struct Replica {
  Model::Workspace<CpuBackend> workspace{batch};
  AlignedBuffer gradients{Model::arena_size};
  Matrix x = Matrix::Random(784, batch);
  Matrix y = Matrix::Zero(1, batch);
};

struct World {
  Model model{1};
  comm::ThreadGroup group{replicas};
  std::vector<std::unique_ptr<Replica>> replicas_;
  World() {
    for (int r = 0; r < replicas; ++r) {
      replicas_.push_back(std::make_unique<Replica>());
      for (int i = 0; i < batch; ++i) replicas_.back()->y(0, i) = float((i + r) % 10);
    }
  }
};
World& world() {
  static World w;
  return w;
}

template <class PerRank>
void on_threads(benchmark::State& state, PerRank body) {
  auto task = [&](int rank) {
    if (rank == 0)
      for (auto _ : state) body(rank);
    else
      for (benchmark::IterationCount i = 0; i < state.max_iterations; ++i) body(rank);
  };
  world().group.run(task);
}

template <class LayerDone>
void forward_backward(Replica& r, LayerDone done) {
  auto& m = world().model;
  m.forward<CpuBackend>(r.workspace, m.parameters().data(), view(r.x), {.training = true});
  SoftmaxCrossEntropy{}.forward_backward<CpuBackend>(r.workspace.output(), view(r.y), r.workspace.output_gradient(),
                                                     1.0f / float(batch * replicas));
  m.backward<CpuBackend>(r.workspace, m.parameters().data(), r.gradients.data(), view(r.x), false, done);
}

void backward_only(benchmark::State& state) {
  on_threads(state, [](int rank) {
    forward_backward(*world().replicas_[std::size_t(rank)], [](std::size_t) {});
    world().group.barrier(rank);
  });
}

void all_reduce_alone(benchmark::State& state) {
  on_threads(state, [](int rank) {
    world().group.communicator(rank).all_reduce(world().replicas_[std::size_t(rank)]->gradients.span(),
                                                comm::ReduceOp::sum);
  });
}

template <comm::Overlap overlap>
void step(benchmark::State& state) {
  std::vector<comm::ThreadCommunicator> comms;
  std::vector<std::unique_ptr<comm::BucketedAllReduce<comm::ThreadCommunicator>>> syncs;
  for (int r = 0; r < replicas; ++r) comms.push_back(world().group.communicator(r));
  for (int r = 0; r < replicas; ++r)
    syncs.push_back(std::make_unique<comm::BucketedAllReduce<comm::ThreadCommunicator>>(
        comms[std::size_t(r)], comm::BucketPlan(Model::offsets, std::size_t(state.range(0))),
        world().replicas_[std::size_t(r)]->gradients.span(), comm::ReduceOp::sum, overlap));
  on_threads(state, [&](int rank) {
    auto& sync = *syncs[std::size_t(rank)];
    forward_backward(*world().replicas_[std::size_t(rank)], [&](std::size_t layer) { sync.layer_done(layer); });
    sync.finish();
  });
  state.counters["buckets"] = double(syncs[0]->plan().buckets().size());
}

BENCHMARK(backward_only)->Name("Step/backward_only")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(all_reduce_alone)->Name("AllReduce/gradients")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(step<comm::Overlap::after_backward>)->Name("Step/after_backward")->Arg(4 << 20)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(step<comm::Overlap::in_backward>)->Name("Step/inline_buckets")->Arg(4 << 20)->Arg(25 << 20)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(step<comm::Overlap::comm_thread>)->Name("Step/overlapped")->Arg(4 << 20)->Arg(25 << 20)->UseRealTime()->Unit(benchmark::kMillisecond);
}  // namespace

BENCHMARK_MAIN();
