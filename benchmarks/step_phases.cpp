// Where the benchmarked step's time goes (mlp_step.hpp: MLP 784-1024-1024-10, batch 256):
// the step's own profiling probe (profile/probe.hpp) times forward, backward, the wait for
// the other replicas' gradients and the update, per step, on replica 0. What step_benchmark
// times as a whole, split into its phases: it tells which part a change moved.
//
//   step_phases[_dnnl] [--steps N] [--rounds R]
//
// prints, per configuration and round, one line of milliseconds per step.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mlp_step.hpp"

namespace {

template <class Trainer>
void phases(char const* name, int steps) {
  using Config = typename Trainer::config;
  using Probe = strata::profile::Probe<Config::num_replicas>;
  using Profiled = strata::train::StepRunner<Config, Model, strata::Sgd, strata::SoftmaxCrossEntropy,
                                             strata::train::gradient_sync_t<Config>, Probe>;
  Model model(1);
  Trainer trainer;
  Profiled runner(trainer.strategy(), model, optimizer, {}, batch_size, 0);
  auto const& batch = real_batch();
  std::vector<strata::profile::Span> spans;
  for (int i = 0; i < 20; ++i) runner.train_on_batch(batch);  // warm: primitives made, pages touched
  runner.probe().drain(spans);
  spans.clear();
  auto const begin = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) runner.train_on_batch(batch);
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  runner.probe().drain(spans);
  using strata::profile::Phase;
  Phase const shown[] = {Phase::forward, Phase::backward, Phase::gradient_wait, Phase::update};
  double total[std::size(shown)] = {};
  for (auto const& s : spans)
    for (std::size_t p = 0; p < std::size(shown); ++p)
      if (s.replica == 0 && s.phase == shown[p]) total[p] += s.seconds();
  std::printf("%-36s step %7.3f ms", name, seconds / steps * 1e3);
  for (std::size_t p = 0; p < std::size(shown); ++p)
    std::printf("  %s %6.3f", strata::profile::name_of(shown[p]), total[p] / steps * 1e3);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 200, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s; use --steps N --rounds R\n", argv[i]);
      return 2;
    }
  }
  if (steps < 1 || rounds < 1) {
    std::fprintf(stderr, "--steps %d and --rounds %d must be >= 1\n", steps, rounds);
    return 2;
  }
  std::printf("engine: %s\n", strata::cpu_gemm_engine().c_str());
  for (int r = 0; r < rounds; ++r) {
    phases<strata::Trainer<strata::Mirrored<2>>>("Mirrored<2>, fp32", steps);
    phases<strata::Trainer<strata::Mirrored<2>, strata::MixedPrecision>>("Mirrored<2>, MixedPrecision", steps);
    phases<strata::Trainer<strata::OneDevice>>("OneDevice, fp32", steps);
    phases<strata::Trainer<strata::OneDevice, strata::MixedPrecision>>("OneDevice, MixedPrecision", steps);
  }
  return 0;
}
