// The flagship example: an MLP trained with two synchronous replicas on the full
// Fashion-MNIST training set (Debian's dataset-fashion-mnist), evaluated on the 10,000
// test images. The last line is `test_accuracy=0.xxxx`.
//
//   fashion_mnist [--epochs N] [--batch-size B] [--precision fp32|bf16|fp16]
//
// Each precision is its own trainer type, Trainer<Mirrored<2>, MixedPrecision> and so on,
// generated at compile time; the flag only picks which one runs.

#include <iostream>

#include <strata.hpp>

#include "command_line.hpp"

template <class Precision>
int train_and_evaluate(int epochs, int batch_size) {
  auto const train = strata::data::fashion_mnist(strata::data::Split::train);
  auto const test = strata::data::fashion_mnist(strata::data::Split::test);

  using Model = strata::Sequential<strata::Dense<784, 256>, strata::Relu, strata::Dense<256, 10>>;
  Model model(/*seed=*/2026);

  strata::Trainer<strata::Mirrored<2>, Precision> trainer;
  std::cout << "Fashion-MNIST: " << train.size() << " training and " << test.size() << " test images; "
            << Model::name() << " (" << Model::parameter_count << " parameters) on "
            << trainer.num_replicas_in_sync() << " replicas, " << Precision::name()
            << "; GEMM: " << strata::cpu_gemm_engine() << "\n";

  auto const history = trainer.fit(model, strata::Adam{.lr = 1e-3f}, strata::SoftmaxCrossEntropy{}, train,
                                   {.epochs = epochs, .batch_size = batch_size, .validation = test, .seed = 7},
                                   strata::ProgressBar{});
  double total_seconds = 0.0;
  for (double s : history.epoch_seconds()) total_seconds += s;
  auto const result = trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, test);
  std::cout << "trained " << history.epochs() << " epochs in " << total_seconds << " s; test loss " << result.loss
            << '\n';
  std::cout << "test_accuracy=" << *result.accuracy << std::endl;
  return 0;
}

int main(int argc, char** argv) {
  auto const flags = examples::TrainingFlags::read(argc, argv);
  if (!flags) return 2;
  return flags->with_precision(
      [&]<class Precision>() { return train_and_evaluate<Precision>(flags->epochs, flags->batch_size); });
}
