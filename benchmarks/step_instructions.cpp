// Runs STEPS training steps of strata's Trainer<OneDevice> (in fp32, bf16 or fp16) or of
// the hand-written Eigen step, for callgrind to count (instruction counts are repeatable
// on a shared, noisy machine where times are not). scripts/count-step-instructions
// collects only inside the step functions and compares them.
//   step_instructions trainer|bf16|fp16|hand STEPS

#include <cstdlib>
#include <string>
#include <iostream>

#include <strata.hpp>

#include "mlp_step.hpp"

template <class Precision>
double trainer_steps(strata::data::Batch const& batch, int steps) {
  using Config = strata::policy::Config<strata::OneDevice, Precision>;
  Model model(1);
  strata::strategy::BasicStrategy<Config> strategy;
  ConfigRunner<Config> runner(strategy, model, optimizer, {}, batch_size, 0);
  double checksum = 0.0;
  for (int s = 0; s < steps; ++s) checksum += runner.train_on_batch(batch).loss_sum;
  return checksum;
}

int main(int argc, char** argv) {
  std::string const mode = argc == 3 ? argv[1] : "";
  if (mode != "trainer" && mode != "bf16" && mode != "fp16" && mode != "hand") {
    std::cerr << "usage: step_instructions trainer|bf16|fp16|hand STEPS\n";
    return 2;
  }
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
  if (mode == "trainer") {
    checksum = trainer_steps<strata::FullPrecision>(batch, steps);
  } else if (mode == "bf16") {
    checksum = trainer_steps<strata::MixedPrecision>(batch, steps);
  } else if (mode == "fp16") {
    checksum = trainer_steps<strata::MixedPrecisionFp16>(batch, steps);
  } else {
    HandWritten net;
    Eigen::Map<Eigen::MatrixXf const> x(batch.features.data, 784, batch_size);
    for (int s = 0; s < steps; ++s) checksum += double(net.step(x, batch.targets.data));
  }
  std::cout << "loss checksum " << checksum << '\n';
}
