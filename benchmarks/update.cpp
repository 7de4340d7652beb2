// The step's optimizer update alone: SGD with momentum on the benchmarked MLP's 1,863,690
// weights (784-1024-1024-10), both cores each taking half, with the weights, momentum and
// gradients cold (four sets of them in turn, 120 MB, past the L3). Three ways to read the
// gradient, scale * (the sum of one or two replicas' arenas):
//
//   Update/in_rule_loop/<arenas>   the element rule sums the arenas in its own loop
//                                  (optim::SummedGradient: what SliceUpdate runs)
//   Update/buffer_2048/<arenas>    comm::reduce_range into an 8 KiB L1 buffer, then the
//                                  update of that chunk (the step before this form)
//   Update/buffer_128/<arenas>     the same, 128 floats at a time (SliceUpdate's fallback:
//                                  more than two arenas, or an optimizer without a rule)
//
//   cmake --build build --target update && build/benchmarks/update --benchmark_repetitions=9
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <span>

#include "strata.hpp"

namespace {

using namespace strata;

constexpr std::size_t weights = 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10;
constexpr int sets = 4;

struct Set {
  AlignedBuffer w{weights}, g0{weights}, g1{weights};
  Sgd::State state;
};

struct Data {
  Sgd sgd{.lr = 0.01f, .momentum = 0.9f};
  std::array<Set, sets> set;
  Data() {
    for (Set& s : set) {
      s.state = sgd.make_state(weights);
      for (std::size_t i = 0; i < weights; ++i) {
        s.w.data()[i] = std::sin(float(i));
        s.g0.data()[i] = 1e-3f * std::cos(float(i));
        s.g1.data()[i] = 1e-3f * std::sin(float(3 * i));
      }
    }
  }
};

Data& data() {
  static Data d;
  return d;
}

enum class Form { in_rule_loop, buffer_2048, buffer_128 };

template <Form F>
void update(Data& d, Set& s, int arenas, std::size_t begin, std::size_t end) {
  float const scale = 1.0f / 256.0f;
  auto const rule = d.sgd.rule(StepInfo{1});
  if constexpr (F == Form::in_rule_loop) {
    optim::SummedGradient const g{s.g0.data() + begin, arenas == 2 ? s.g1.data() + begin : nullptr, scale};
    optim::apply_rule(rule, std::span<float>(s.w.data() + begin, end - begin), g, s.state, begin);
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

template <Form F>
void Update(benchmark::State& state) {
  Data& d = data();
  int const arenas = int(state.range(0));
  // This thread's half, on a cache-line boundary.
  std::size_t const half = (weights / 2) / 16 * 16;
  std::size_t const begin = state.thread_index() == 0 ? 0 : half;
  std::size_t const end = state.thread_index() == 0 ? half : weights;
  int next = 0;
  for (auto _ : state) {
    update<F>(d, d.set[std::size_t(next)], arenas, begin, end);
    next = (next + 1) % sets;
  }
  // Bytes the update must move: read the arenas, read and write the weights and momentum.
  state.SetBytesProcessed(state.iterations() * std::int64_t(end - begin) * std::int64_t(sizeof(float)) * (arenas + 4));
}

BENCHMARK(Update<Form::in_rule_loop>)->Name("Update/in_rule_loop")->Arg(1)->Arg(2)->Threads(2)->UseRealTime();
BENCHMARK(Update<Form::buffer_2048>)->Name("Update/buffer_2048")->Arg(1)->Arg(2)->Threads(2)->UseRealTime();
BENCHMARK(Update<Form::buffer_128>)->Name("Update/buffer_128")->Arg(1)->Arg(2)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
