// Where the benchmarked step's time goes (mlp_step.hpp: MLP 784-1024-1024-10, batch 256):
// the step's own profiling probe (profile/probe.hpp) times forward, backward, the wait for
// the other replicas' gradients and the update, per step, on replica 0. What step_benchmark
// times as a whole, split into its phases: it tells which part a change moved.
//
//   step_phases[_dnnl] [--steps N] [--rounds R] [--input repeat|epoch|all]
//
// prints, per configuration and round, one line of milliseconds per step. The input:
//   repeat  one real batch, again and again (what step_benchmark times; the default);
//   epoch   an epoch of the training set as fit reads it: shuffled batches gathered by the
//           prefetch thread, each one new, while the weights move (--steps is ignored: an
//           epoch is 234 steps);
//   all     repeat, epoch and Trainer::fit itself (its second epoch, wall time only: fit's
//           probe is off), one after the other in the same process, round by round, so
//           that a difference between them is not the machine's hour.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mlp_step.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int epoch_steps = 60000 / batch_size;

strata::data::Dataset const& training_set() {
  static auto const data = strata::data::fashion_mnist(strata::data::Split::train).take(epoch_steps * batch_size);
  return data;
}

double seconds_since(Clock::time_point begin) { return std::chrono::duration<double>(Clock::now() - begin).count(); }

// One configuration's trainer, model and profiled runner, kept across rounds.
template <class Trainer>
class Phases {
  using Config = typename Trainer::config;
  using Probe = strata::profile::Probe<Config::num_replicas>;
  using Profiled = strata::train::StepRunner<Config, Model, strata::Sgd, strata::SoftmaxCrossEntropy,
                                             strata::train::gradient_sync_t<Config>, Probe>;

 public:
  explicit Phases(char const* name) : name_(name) {
    for (int i = 0; i < 20; ++i) runner_.train_on_batch(real_batch());  // warm: primitives made, pages touched
    runner_.probe().drain(spans_);
    spans_.clear();
  }

  void repeat(int steps) {
    auto const& batch = real_batch();
    auto const begin = Clock::now();
    for (int i = 0; i < steps; ++i) runner_.train_on_batch(batch);
    report("repeat", seconds_since(begin), steps);
  }

  // Steps over one pass of the input fit reads (strategy/epoch_input.hpp), looking one
  // batch ahead as fit does.
  void epoch(int number) {
    strata::strategy::SharedInput const input(training_set(), batch_size, /*shuffle=*/true, /*seed=*/7, /*prefetch=*/1);
    auto stream = input.pass(number, 0);
    int steps = 0;
    auto const begin = Clock::now();
    for (strata::strategy::StepBatch const *step = stream.next(), *next = nullptr; step; step = next) {
      next = stream.next();
      runner_.train_on_batch(*step->batch, next ? next->batch : nullptr, step->part);
      ++steps;
    }
    report("epoch", seconds_since(begin), steps);
  }

  // Trainer::fit for two epochs on a new model; its second epoch (the first makes the primitives).
  void fit() {
    Model model(2);
    auto const history = trainer_.fit(model, optimizer, strata::SoftmaxCrossEntropy{}, training_set(),
                                      {.epochs = 2, .batch_size = batch_size, .seed = 7});
    std::printf("%-30s %-7s step %7.3f ms\n", name_, "fit", history.epoch_seconds()[1] / epoch_steps * 1e3);
    std::fflush(stdout);
  }

 private:
  void report(char const* input, double seconds, int steps) {
    runner_.probe().drain(spans_);
    using strata::profile::Phase;
    Phase const shown[] = {Phase::forward, Phase::backward, Phase::gradient_wait, Phase::update};
    double total[std::size(shown)] = {};
    for (auto const& s : spans_)
      for (std::size_t p = 0; p < std::size(shown); ++p)
        if (s.replica == 0 && s.phase == shown[p]) total[p] += s.seconds();
    spans_.clear();
    std::printf("%-30s %-7s step %7.3f ms", name_, input, seconds / steps * 1e3);
    for (std::size_t p = 0; p < std::size(shown); ++p)
      std::printf("  %s %6.3f", strata::profile::name_of(shown[p]), total[p] / steps * 1e3);
    std::printf("\n");
    std::fflush(stdout);
  }

  char const* name_;
  Model model_{1};
  Trainer trainer_;
  Profiled runner_{trainer_.strategy(), model_, optimizer, {}, batch_size, 0};
  std::vector<strata::profile::Span> spans_;
};

template <class... Trainers>
void run(std::string const& input, int steps, int rounds, Phases<Trainers>&... configs) {
  for (int r = 0; r < rounds; ++r) {
    auto one = [&](auto& phases) {
      if (input == "repeat" || input == "all") phases.repeat(input == "all" ? epoch_steps : steps);
      if (input == "epoch" || input == "all") phases.epoch(r);
      if (input == "all") phases.fit();
    };
    (one(configs), ...);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 200, rounds = 3;
  std::string input = "repeat";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--input") == 0) input = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s; use --steps N --rounds R --input repeat|epoch|all\n", argv[i]);
      return 2;
    }
  }
  if (steps < 1 || rounds < 1 || (input != "repeat" && input != "epoch" && input != "all")) {
    std::fprintf(stderr, "--steps %d and --rounds %d must be >= 1 and --input %s one of repeat, epoch, all\n", steps,
                 rounds, input.c_str());
    return 2;
  }
  std::printf("engine: %s\n", strata::cpu_gemm_engine().c_str());
  try {
    Phases<strata::Trainer<strata::Mirrored<2>>> mirrored("Mirrored<2>, fp32");
    Phases<strata::Trainer<strata::Mirrored<2>, strata::MixedPrecision>> mirrored_mixed("Mirrored<2>, MixedPrecision");
    Phases<strata::Trainer<strata::OneDevice>> one_device("OneDevice, fp32");
    Phases<strata::Trainer<strata::OneDevice, strata::MixedPrecision>> one_device_mixed("OneDevice, MixedPrecision");
    run(input, steps, rounds, mirrored, mirrored_mixed, one_device, one_device_mixed);
  } catch (strata::Error const& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
