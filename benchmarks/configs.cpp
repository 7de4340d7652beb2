// The configuration matrix (issue 6, item 2): one training step of the MLP 784-1024-1024-10
// (SGD with momentum, global batch 256, a real Fashion-MNIST batch) for every combination
// of the policy lists below, generated from the lists, not written out by hand. A slot
// whose policies have not landed is left out of its list. Under GradAccum<K> one iteration
// is one micro-batch (an optimizer step every K).
// Run: build/benchmarks/configs --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//        --benchmark_report_aggregates_only=true   (one line)

#include <string>

#include <benchmark/benchmark.h>

#include <strata.hpp>

#include "config_step.hpp"

namespace {

template <class... Ts>
struct List {};

using Strategies = List<strata::OneDevice, strata::Mirrored<2>, strata::Mirrored<4>>;
using Precisions = List<strata::FullPrecision, strata::MixedPrecision, strata::MixedPrecisionFp16>;
using Accumulations = List<strata::GradAccum<1>, strata::GradAccum<4>>;

template <class S, class P, class A>
void register_one() {
  using Config = strata::policy::Config<S, P, A>;
  std::string const name = S::name() + "/" + P::name() + "/" + A::name();
  benchmark::RegisterBenchmark(name.c_str(), config_step<Config>)->UseRealTime();
}

// Every (S, P, A) of the three lists, in list order.
template <class... Ss, class... Ps, class... As>
void register_all(List<Ss...>, List<Ps...>, List<As...>) {
  auto for_precision = []<class S, class P>() { (register_one<S, P, As>(), ...); };
  auto for_strategy = [&]<class S>() { (for_precision.template operator()<S, Ps>(), ...); };
  (for_strategy.template operator()<Ss>(), ...);
}

}  // namespace

int main(int argc, char** argv) {
  register_all(Strategies{}, Precisions{}, Accumulations{});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
