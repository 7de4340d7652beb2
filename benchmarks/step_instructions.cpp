// Runs STEPS training steps of strata's Trainer<OneDevice> (in fp32, bf16 or fp16) or of
// the hand-written Eigen step, for callgrind to count (instruction counts are repeatable
// on a shared, noisy machine where times are not). scripts/count-step-instructions
// collects only inside the step functions and compares them.
//   step_instructions trainer|bf16|fp16|hand STEPS
//   step_instructions_probed probed STEPS   the fp32 step with the profiling probe on (what a
//                                           fit with a Profiler runs). A binary of its own: a
//                                           second instantiation of the step in this one would
//                                           change how GCC compiles the first (a clone of the
//                                           GEMM wrapper whose zeroing becomes a memset, which
//                                           callgrind counts byte by byte).

#include <cstdlib>
#include <string>
#include <vector>
#include <iostream>

#include <strata.hpp>

#include "mlp_step.hpp"

// The one function callgrind collects inside (scripts/count-step-instructions): never
// inlined, and no lambda of its own, so that no function it calls carries its name (callgrind
// toggles collection at every function whose name matches, nested ones too).
template <class Step>
[[gnu::noinline]] double counted_step(Step const& step) {
  return step();
}

template <class Precision, class Probe = strata::profile::NoProbe>
double trainer_steps(strata::data::Batch const& batch, int steps) {
  using Config = strata::policy::Config<strata::OneDevice, Precision>;
  Model model(1);
  // One thread, as the hand-written step: intra-op threads would split the same work over more.
  strata::strategy::BasicStrategy<Config> strategy({.intra_op_threads = 1});
  strata::train::StepRunner<Config, Model, strata::Sgd, strata::SoftmaxCrossEntropy, strata::train::gradient_sync_t<Config>,
                            Probe>
      runner(strategy, model, optimizer, {}, batch_size, 0);
  double checksum = 0.0;
  std::vector<strata::profile::Span> spans;
  for (int s = 0; s < steps; ++s) {
    checksum += counted_step([&] { return double(runner.train_on_batch(batch).loss_sum); });
    if constexpr (Probe::enabled) runner.probe().drain(spans);  // as fit does, outside the step
  }
  return checksum;
}

int main(int argc, char** argv) {
  std::string const mode = argc == 3 ? argv[1] : "";
#ifdef STRATA_STEP_PROBED
  if (mode != "probed") {
    std::cerr << "usage: step_instructions_probed probed STEPS\n";
    return 2;
  }
#else
  if (mode != "trainer" && mode != "bf16" && mode != "fp16" && mode != "hand") {
    std::cerr << "usage: step_instructions trainer|bf16|fp16|hand STEPS\n";
    return 2;
  }
#endif
  int const steps = std::atoi(argv[2]);
  // Synthetic but fixed inputs: the counts must not depend on reading a 26 MB gzip file.
  strata::Matrix features(784, batch_size), labels(1, batch_size);
  strata::Rng rng(1);
  for (int i = 0; i < features.size(); ++i) features.data()[i] = rng.uniform();
  for (int j = 0; j < batch_size; ++j) labels(0, j) = float(j % 10);
  strata::Dataset data(features, labels);
  auto stream = data.batch(batch_size).stream(0);
  strata::data::Batch const& batch = *stream->next();

  double checksum = 0.0;
#ifdef STRATA_STEP_PROBED
  checksum = trainer_steps<strata::FullPrecision, strata::profile::Probe<1>>(batch, steps);
#else
  if (mode == "trainer") {
    checksum = trainer_steps<strata::FullPrecision>(batch, steps);
  } else if (mode == "bf16") {
    checksum = trainer_steps<strata::MixedPrecision>(batch, steps);
  } else if (mode == "fp16") {
    checksum = trainer_steps<strata::MixedPrecisionFp16>(batch, steps);
  } else {
    HandWritten net;
    Eigen::Map<Eigen::MatrixXf const> x(batch.features.data, 784, batch_size);
    for (int s = 0; s < steps; ++s) checksum += counted_step([&] { return double(net.step(x, batch.targets.data)); });
  }
#endif
  std::cout << "loss checksum " << checksum << '\n';
}
