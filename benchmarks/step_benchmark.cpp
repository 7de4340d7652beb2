// One training step of the MLP 784-1024-1024-10 (ReLU, softmax cross-entropy, SGD with
// momentum) at global batch 256 on Fashion-MNIST:
//   Trainer/OneDevice   strata's generated step, one replica, its GEMMs split over every core
//                       (intra-op threads, automatic)
//   Trainer/OneDevice/intra_op_1   the same on the replica's thread alone (intra_op_threads = 1)
//   HandWritten/Eigen   the same arithmetic written by hand with Eigen (the zero-overhead yardstick)
//   Trainer/Mirrored2   strata's step on two replica threads
//   Trainer/Mirrored2/one_barrier   the same with the update behind one barrier after backward,
//                       as before the replicas took the update's chunks layer by layer as every
//                       replica finished them (train/gradient_sync.hpp, ThreadSync): what that saves
//   Trainer/Mirrored2/update_skipped   the same step with an optimizer that leaves the weights
//                       as they are: everything but the update's arithmetic and memory traffic
//                       (forward, backward, the layer marks, the claims and waits), the ceiling
//                       the update leaves to the rest of the step against GemmOnly
//   .../MixedPrecision  the same under MixedPrecision (bf16 products with oneDNN on AVX512_BF16)
//   GemmOnly/threads/N  only the GEMMs of one replica's step at batch 256/N, on N threads at once:
//                       the machine's GEMM rate for exactly this step's shapes (GemmOnly/bf16: in bf16,
//                       the weights read from a bf16 copy as the trainer's products read them)
//   GemmOnly/intra_op/N the same GEMMs at batch 256 on one replica, split over N intra-op threads:
//                       what OneDevice's products cost alone
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
// Every replica's gradients summed in place as ThreadSync does, but each replica's update of
// its own half starts only when all have finished backward.
template <int Replicas>
class OneBarrierSync : public strata::train::ReplicaArenas<Replicas> {
 public:
  OneBarrierSync(strata::comm::ThreadGroup& group, std::span<float> gradients, std::span<std::size_t const>)
      : strata::train::ReplicaArenas<Replicas>(group, gradients) {}
  void begin_reduction(bool) {}
  void layer_done(int, std::size_t) {}
  void gradients_ready(int r) { this->barrier(r); }
  [[nodiscard]] std::span<float const* const> summands(int) const { return this->gradients_; }
  [[nodiscard]] static constexpr int num_replicas_in_sync() { return Replicas; }
};

template <class Trainer>
void one_barrier_step(benchmark::State& state) {
  using Config = typename Trainer::config;
  Model model(1);
  Trainer trainer;
  strata::train::StepRunner<Config, Model, strata::Sgd, strata::SoftmaxCrossEntropy, OneBarrierSync<Config::num_replicas>>
      runner(trainer.strategy(), model, optimizer, {}, batch_size, 0);
  auto const& batch = real_batch();
  for (auto _ : state) benchmark::DoNotOptimize(runner.train_on_batch(batch));
  report(state, batch_size);
}

// An optimizer whose element rule changes nothing: the update's chunks are still claimed and
// waited for, but the compiler leaves out its loads and stores.
STRATA_ELEMENT_RULE(KeepRule, struct KeepRule {
  void operator()(float&, float) const {}
};)
struct Keep {
  static constexpr char const* name = "Keep";
  struct State {
    template <class F>
    void for_each_slot(F&&) {}
  };
  void validate() const {}
  [[nodiscard]] State make_state(std::size_t) const { return {}; }
  [[nodiscard]] KeepRule rule(strata::optim::StepInfo) const { return {}; }
  void update(std::span<float>, std::span<float const>, State&, std::size_t, strata::optim::StepInfo) const {}
};

template <class Trainer>
void update_skipped_step(benchmark::State& state) {
  Model model(1);
  Trainer trainer;
  strata::train::StepRunner<typename Trainer::config, Model, Keep, strata::SoftmaxCrossEntropy> runner(
      trainer.strategy(), model, Keep{}, {}, batch_size, 0);
  auto const& batch = real_batch();
  for (auto _ : state) benchmark::DoNotOptimize(runner.train_on_batch(batch));
  report(state, batch_size);
}

BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::OneDevice>)->Name("Trainer/OneDevice")->UseRealTime();
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::OneDevice>, 1)->Name("Trainer/OneDevice/intra_op_1")->UseRealTime();
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::Mirrored<2>>)->Name("Trainer/Mirrored2")->UseRealTime();
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::OneDevice, strata::MixedPrecision>)
    ->Name("Trainer/OneDevice/MixedPrecision")
    ->UseRealTime();
BENCHMARK_TEMPLATE(trainer_step, strata::Trainer<strata::Mirrored<2>, strata::MixedPrecision>)
    ->Name("Trainer/Mirrored2/MixedPrecision")
    ->UseRealTime();
BENCHMARK_TEMPLATE(one_barrier_step, strata::Trainer<strata::Mirrored<2>>)->Name("Trainer/Mirrored2/one_barrier")->UseRealTime();
BENCHMARK_TEMPLATE(update_skipped_step, strata::Trainer<strata::Mirrored<2>>)
    ->Name("Trainer/Mirrored2/update_skipped")
    ->UseRealTime();
BENCHMARK_TEMPLATE(one_barrier_step, strata::Trainer<strata::Mirrored<2>, strata::MixedPrecision>)
    ->Name("Trainer/Mirrored2/MixedPrecision/one_barrier")
    ->UseRealTime();

void hand_written_step(benchmark::State& state) {
  HandWritten net;
  auto const& batch = real_batch();
  Eigen::Map<Eigen::MatrixXf const> x(batch.features.data, 784, batch_size);
  for (auto _ : state) benchmark::DoNotOptimize(net.step(x, batch.targets.data));
  report(state, batch_size);
}
BENCHMARK(hand_written_step)->Name("HandWritten/Eigen")->UseRealTime();

// Only the eight GEMMs of a replica's step (3 forward, 3 weight gradients, 2 input gradients),
// through the CPU backend's engine (Eigen, OpenBLAS or oneDNN, as the program links),
// at the replica's share of the batch, on N threads at once (plain std::threads kept alive
// in a strata ThreadGroup, whose dispatch costs microseconds against GEMMs of milliseconds).
// As in Mirrored<N>, the threads read one copy of the weights and write their own gradients;
// in bf16 they read the weights from a bf16 copy (and, on strata's bf16 kernel, from the
// packed copy), as the trainer's products do, and round only the activations per product.
// GemmOnly/intra_op: one replica of the whole batch whose products split their output
// columns over a team of N threads, as OneDevice's do.
void gemm_only(benchmark::State& state, bool intra_op) {
  int const threads = int(state.range(0));
  int const replica_threads = intra_op ? 1 : threads;
  int const per_replica = batch_size / replica_threads;
  using M = Eigen::MatrixXf;
  strata::AlignedBuffer arena(1024 * 784 + 1024 * 1024 + 10 * 1024);
  strata::ConstMatrixView const w1{arena.data(), 1024, 784}, w2{w1.data + w1.size(), 1024, 1024},
      w3{w2.data + w2.size(), 10, 1024};
  Eigen::Map<M>(arena.data(), Eigen::Index(arena.size()), 1) = M::Random(Eigen::Index(arena.size()), 1) * 0.05f;
  strata::AlignedArray<strata::bf16> arena_bf16(arena.size());
  strata::round_with_bf16_copy(nullptr, arena_bf16.data(), arena.data(), arena.size());
  // Where strata's bf16 kernel multiplies, the weights' packed copies too (train/replica_pass.hpp).
  std::vector<std::vector<strata::bf16>> packed;
  std::vector<strata::PackedBf16Matrix> packed_matrices;
  if (strata::bf16_kernel_products())
    for (strata::ConstMatrixView const w : {w1, w2, w3}) {
      packed.emplace_back(strata::bf16_gemm::packed_a_size(w.rows, w.cols));
      strata::bf16_gemm::pack_a(packed.back().data(), strata::bf16_gemm::Factor<float>{w.data, w.rows, false}, w.rows,
                                w.cols);
      packed_matrices.push_back({w.data, w.rows, w.cols, packed.back().data()});
    }
  struct Replica {
    M x, h1, h2, z, d2, d1, g1 = M(1024, 784), g2 = M(1024, 1024), g3 = M(10, 1024);
    explicit Replica(int n) : x(M::Random(784, n)), h1(1024, n), h2(1024, n), z(10, n), d2(1024, n), d1(1024, n) {}
  };
  std::vector<Replica> replicas;
  for (int t = 0; t < replica_threads; ++t) replicas.emplace_back(per_replica);
  bool const bf16 = state.range(1) != 0;
  auto gemm = [](strata::ConstMatrixView a, strata::Transpose ta, M const& b, strata::Transpose tb, M& c) {
    strata::CpuBackend::gemm(ta, tb, 1.0f, a, strata::view(b), 0.0f, strata::view(c));
  };
  constexpr auto no = strata::Transpose::no;
  constexpr auto yes = strata::Transpose::yes;
  auto task = [&](int rank) {
    strata::Bf16ProductsBinding const products(bf16);
    strata::Bf16CopyBinding const weights_bf16(
        bf16 ? strata::Bf16Copy{arena.data(), arena_bf16.data(), arena.size(), packed_matrices} : strata::Bf16Copy{});
    Replica& r = replicas[std::size_t(rank)];
    gemm(w1, no, r.x, no, r.h1);
    gemm(w2, no, r.h1, no, r.h2);
    gemm(w3, no, r.h2, no, r.z);
    gemm(strata::view(r.z), no, r.h2, yes, r.g3);
    gemm(w3, yes, r.z, no, r.d2);
    gemm(strata::view(r.d2), no, r.h1, yes, r.g2);
    gemm(w2, yes, r.d2, no, r.d1);
    gemm(strata::view(r.d1), no, r.x, yes, r.g1);
  };
  strata::comm::ThreadGroup group(replica_threads);
  strata::comm::ThreadGroup team_threads(intra_op ? threads : 1);
  strata::IntraOpTeam const team = team_threads.intra_op_team();
  if (intra_op) group.bind_intra_op(0, &team);
  for (auto _ : state) {
    group.run(task);
    benchmark::ClobberMemory();
  }
  report(state, batch_size);
}
BENCHMARK_CAPTURE(gemm_only, threads, false)->Name("GemmOnly/threads")->Args({1, 0})->Args({2, 0})->UseRealTime();
// The same with bf16 inputs and float sums, where the engine has them (oneDNN on AVX512_BF16;
// elsewhere these are the float products again).
BENCHMARK_CAPTURE(gemm_only, bf16, false)->Name("GemmOnly/bf16/threads")->Args({1, 1})->Args({2, 1})->UseRealTime();
BENCHMARK_CAPTURE(gemm_only, intra_op, true)->Name("GemmOnly/intra_op")->Args({2, 0})->UseRealTime();
BENCHMARK_CAPTURE(gemm_only, bf16_intra_op, true)->Name("GemmOnly/bf16/intra_op")->Args({2, 1})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
