#include <strata.hpp>

#include <iostream>

// Trains a tiny model on a closed-form task (y = sign of x0) and checks that it learned it.
int main() {
  strata::Matrix x = strata::Matrix::Random(2, 256);
  std::vector<std::int32_t> labels(256);
  for (int i = 0; i < 256; ++i) labels[std::size_t(i)] = x(0, i) > 0.0f ? 1 : 0;
  strata::Dataset data(x, labels);
  strata::Sequential<strata::Dense<2, 8>, strata::Relu, strata::Dense<8, 2>> model(7);
  strata::Trainer<strata::GradAccum<2>, strata::Mirrored<2>> trainer;
  trainer.fit(model, strata::Adam{.lr = 0.05f}, strata::SoftmaxCrossEntropy{}, data, {.epochs = 30, .batch_size = 32});
  double const accuracy = *trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, data).accuracy;
  std::cout << "consumer accuracy=" << accuracy << '\n';
  return accuracy > 0.9 ? 0 : 1;
}
