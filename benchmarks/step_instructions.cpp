// Runs STEPS training steps of strata's Trainer<OneDevice> or of the hand-written Eigen
// step, for callgrind to count (instruction counts are repeatable on a shared, noisy
// machine where times are not). scripts/count-step-instructions collects only inside the
// step functions and compares the two.
//   step_instructions trainer|hand STEPS

#include <cstdlib>
#include <cstring>
#include <iostream>

#include <strata.hpp>

#include "mlp_step.hpp"

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "trainer") != 0 && std::strcmp(argv[1], "hand") != 0)) {
    std::cerr << "usage: step_instructions trainer|hand STEPS\n";
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
  if (std::strcmp(argv[1], "trainer") == 0) {
    Model model(1);
    strata::Trainer<strata::OneDevice> trainer;
    Runner<strata::Trainer<strata::OneDevice>> runner(trainer.strategy(), model, optimizer, {}, batch_size, 0);
    for (int s = 0; s < steps; ++s) checksum += runner.train_on_batch(batch).loss_sum;
  } else {
    HandWritten net;
    Eigen::Map<Eigen::MatrixXf const> x(batch.features.data, 784, batch_size);
    for (int s = 0; s < steps; ++s) checksum += double(net.step(x, batch.targets.data));
  }
  std::cout << "loss checksum " << checksum << '\n';
}
