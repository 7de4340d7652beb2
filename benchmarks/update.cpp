// The step's optimizer update alone: SGD with momentum on the benchmarked MLP's 1,863,690
// weights (784-1024-1024-10), two threads each taking half. The second argument is how many
// sets of weights, momentum and gradients are taken in turn: 4 (120 MB) leaves them cold,
// past the L3; 1 (22 MB with one arena, 30 MB with two) leaves them where the last update
// put them, in the L3 where it holds them. Three ways to read the gradient, scale * (the
// sum of one or two replicas' arenas):
//
//   Update/in_rule_loop/<arenas>/<sets>  the element rule sums the arenas in its own loop
//                                        (optim::SummedGradient), one call per thread
//   Update/in_rule_loop_chunks/...       the same, one call per SliceUpdate::chunk_floats
//                                        (2,048): the step's chunks, which the refresh of
//                                        bf16 copies needs
//   Update/buffer_2048/<arenas>/4        comm::reduce_range into an 8 KiB L1 buffer, then
//                                        the update of that chunk (the step before this form)
//   Update/buffer_128/<arenas>/4         the same, 128 floats at a time (SliceUpdate's
//                                        fallback: more than two arenas, or no element rule)
//
//   Update/gradients_read_first          in_rule_loop_chunks/2/4 with both arenas read by the
//                                        two threads just before it (untimed): gradients in
//                                        the caches, weights and momentum cold
//   Update/gradients_written_first       the same with the arenas written just before, as the
//                                        step's weight-gradient products leave them (dirty)
//
//   Adam/one_at_a_time/<sets>             Adam's update of the same weights on one thread,
//                                        two arenas, its rule called one weight at a time
//                                        (the loop GCC does not vectorize: it calls sqrtf)
//   Adam/block_at_a_time/<sets>           optim::apply_rule, which runs AdamRule a block at
//                                        a time (optim::RootSplitRule): the same bits
//
//   cmake --build build --target update && build/benchmarks/update --benchmark_repetitions=9
//       --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <utility>

#include "strata.hpp"

namespace {

using namespace strata;

constexpr std::size_t weights = 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10;
constexpr int sets = 4;

// One set of weights, two replicas' gradients and the optimizer O's state.
template <class O>
struct OptimizerSet {
  AlignedBuffer w{weights}, g0{weights}, g1{weights};
  typename O::State state;
  explicit OptimizerSet(O const& optimizer) : state(optimizer.make_state(weights)) {
    for (std::size_t i = 0; i < weights; ++i) {
      w.data()[i] = std::sin(float(i));
      g0.data()[i] = 1e-3f * std::cos(float(i));
      g1.data()[i] = 1e-3f * std::sin(float(3 * i));
    }
  }
};
using Set = OptimizerSet<Sgd>;

struct Data {
  Sgd sgd{.lr = 0.01f, .momentum = 0.9f};
  std::array<Set, sets> set{Set(sgd), Set(sgd), Set(sgd), Set(sgd)};
};

Data& data() {
  static Data d;
  return d;
}

// Thread r's half of the weights, [begin, end); the second half starts on a cache line.
std::pair<std::size_t, std::size_t> half_of(int r) {
  constexpr std::size_t half = (weights / 2) / 16 * 16;
  return r == 0 ? std::pair{std::size_t{0}, half} : std::pair{half, weights};
}

enum class Form { in_rule_loop, in_rule_loop_chunks, buffer_2048, buffer_128 };

template <Form F>
void update(Data& d, Set& s, int arenas, std::size_t begin, std::size_t end) {
  float const scale = 1.0f / 256.0f;
  auto const rule = d.sgd.rule(StepInfo{1});
  auto in_rule = [&](std::size_t from, std::size_t to) {  // weights [from, to), one call
    optim::SummedGradient const g{s.g0.data() + from, arenas == 2 ? s.g1.data() + from : nullptr, scale};
    optim::apply_rule(rule, std::span<float>(s.w.data() + from, to - from), g, s.state, from);
  };
  if constexpr (F == Form::in_rule_loop) {
    in_rule(begin, end);
  } else if constexpr (F == Form::in_rule_loop_chunks) {
    constexpr std::size_t chunk = train::SliceUpdate<Sgd, policy::Cpu, 1, float>::chunk_floats;
    for (std::size_t at = begin; at < end; at += chunk) in_rule(at, std::min(end, at + chunk));
  } else {
    constexpr std::size_t piece = F == Form::buffer_2048 ? 2048 : 128;
    float const* const peers[2] = {s.g0.data(), s.g1.data()};
    alignas(64) float reduced[piece];
    for (std::size_t at = begin; at < end; at += piece) {
      std::size_t const n = std::min(piece, end - at);
      comm::reduce_range(peers, arenas, at, at + n, ReduceOp::sum, scale, reduced);
      d.sgd.update(std::span<float>(s.w.data() + at, n), std::span<float const>(reduced, n), s.state, at, StepInfo{1});
    }
  }
}

// One iteration is one whole update: the two halves on a two-thread comm::ThreadGroup (the
// step's replica threads), so that the time is the update's wall time. (A Threads(2)
// benchmark would report the wall time over the iterations of both threads: half of it.)
template <Form F>
void Update(benchmark::State& state) {
  Data& d = data();
  static comm::ThreadGroup group(2);
  int const arenas = int(state.range(0));
  int const cycle = int(state.range(1));  // sets taken in turn
  int next = 0;
  for (auto _ : state) {
    Set& set = d.set[std::size_t(next)];
    auto task = [&](int r) { update<F>(d, set, arenas, half_of(r).first, half_of(r).second); };
    group.run(task);
    next = (next + 1) % cycle;
  }
  // Bytes the update must move: read the arenas, read and write the weights and momentum.
  state.SetBytesProcessed(state.iterations() * std::int64_t(weights) * std::int64_t(sizeof(float)) * (arenas + 4));
}

BENCHMARK(Update<Form::in_rule_loop>)->Name("Update/in_rule_loop")->ArgsProduct({{1, 2}, {1, sets}})->UseRealTime();
BENCHMARK(Update<Form::in_rule_loop_chunks>)
    ->Name("Update/in_rule_loop_chunks")
    ->ArgsProduct({{1, 2}, {1, sets}})
    ->UseRealTime();
BENCHMARK(Update<Form::buffer_2048>)->Name("Update/buffer_2048")->Args({1, sets})->Args({2, sets})->UseRealTime();
BENCHMARK(Update<Form::buffer_128>)->Name("Update/buffer_128")->Args({1, sets})->Args({2, sets})->UseRealTime();

// Update/in_rule_loop_chunks/2/4 with both arenas of the set read (or written) by the two
// threads just before the timed update: where the step's update finds its gradients, which
// the weight-gradient products wrote (dirty, in the caches) while the weights and momentum
// are cold.
template <bool Write>
void UpdateAfterGradients(benchmark::State& state) {
  Data& d = data();
  static comm::ThreadGroup group(2);
  int next = 0;
  for (auto _ : state) {
    Set& set = d.set[std::size_t(next)];
    state.PauseTiming();
    auto touch = [&](int r) {
      auto const [begin, end] = half_of(r);
      float sum = 0.0f;
      for (float* g : {set.g0.data(), set.g1.data()})
        for (std::size_t i = begin; i < end; ++i) {
          if constexpr (Write) g[i] = -g[i];  // every line written, the values kept bounded
          else sum += g[i];
        }
      benchmark::DoNotOptimize(sum);
    };
    group.run(touch);
    state.ResumeTiming();
    auto task = [&](int r) { update<Form::in_rule_loop_chunks>(d, set, 2, half_of(r).first, half_of(r).second); };
    group.run(task);
    next = (next + 1) % sets;
  }
}
BENCHMARK(UpdateAfterGradients<false>)->Name("Update/gradients_read_first")->UseRealTime();
BENCHMARK(UpdateAfterGradients<true>)->Name("Update/gradients_written_first")->UseRealTime();

template <bool Blocks>
void AdamUpdate(benchmark::State& state) {
  using AdamSet = OptimizerSet<Adam>;
  static std::array<AdamSet, sets> set{AdamSet(Adam{}), AdamSet(Adam{}), AdamSet(Adam{}), AdamSet(Adam{})};
  int const cycle = int(state.range(0));
  optim::AdamRule const rule = Adam{}.rule(StepInfo{3});
  float const scale = 1.0f / 256.0f;
  int next = 0;
  for (auto _ : state) {
    AdamSet& s = set[std::size_t(next)];
    if constexpr (Blocks) {
      optim::apply_rule(rule, std::span<float>(s.w.data(), weights), optim::SummedGradient{s.g0.data(), s.g1.data(), scale},
                        s.state, 0);
    } else {
      float* __restrict w = s.w.data();
      float* __restrict m = s.state.m.data();
      float* __restrict v = s.state.v.data();
      float const* __restrict a = s.g0.data();
      float const* __restrict b = s.g1.data();
      for (std::size_t i = 0; i < weights; ++i) rule(w[i], (a[i] + b[i]) * scale, m[i], v[i]);
    }
    benchmark::DoNotOptimize(s.w.data());
    next = (next + 1) % cycle;
  }
  // Read two arenas, read and write the weights and both moments.
  state.SetBytesProcessed(state.iterations() * std::int64_t(weights) * std::int64_t(sizeof(float)) * 8);
}
BENCHMARK(AdamUpdate<false>)->Name("Adam/one_at_a_time")->Arg(1)->Arg(sets)->UseRealTime();
BENCHMARK(AdamUpdate<true>)->Name("Adam/block_at_a_time")->Arg(1)->Arg(sets)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
