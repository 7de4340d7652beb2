// The flagship model on a GPU: Trainer<Mirrored<2>, Cuda, Precision>, two logical replicas
// on device 0, on the full Fashion-MNIST. Without a GPU it says so and exits 77.
//
//   fashion_mnist_gpu [--epochs N] [--batch-size B] [--precision fp32|bf16|fp16]

#include <iostream>

#include <strata.hpp>
#include <strata/cuda.hpp>

#include "../command_line.hpp"

template <class Precision>
int train_and_evaluate(int epochs, int batch_size) {
  auto const train = strata::data::fashion_mnist(strata::data::Split::train);
  auto const test = strata::data::fashion_mnist(strata::data::Split::test);
  strata::Sequential<strata::Dense<784, 256>, strata::Relu, strata::Dense<256, 10>> model(/*seed=*/2026);

  strata::Trainer<strata::Mirrored<2>, strata::Cuda, Precision> trainer;
  std::cout << "Fashion-MNIST on " << strata::cuda::device_info(0).name << ", " << trainer.num_replicas_in_sync()
            << " logical replicas, " << Precision::name() << "\n";
  auto const history = trainer.fit(model, strata::Adam{.lr = 1e-3f}, strata::SoftmaxCrossEntropy{}, train,
                                   {.epochs = epochs, .batch_size = batch_size, .validation = test, .seed = 7},
                                   strata::ProgressBar{});
  double seconds = 0.0;
  for (double s : history.epoch_seconds()) seconds += s;
  auto const result = trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, test);
  std::cout << "trained " << history.epochs() << " epochs in " << seconds << " s\n";
  std::cout << "test_accuracy=" << *result.accuracy << std::endl;
  return 0;
}

int main(int argc, char** argv) {
  auto const flags = examples::TrainingFlags::read(argc, argv);
  if (!flags) return 2;
  if (strata::cuda::device_count() == 0) {
    std::cout << "SKIPPED: no CUDA device here; this example needs an NVIDIA GPU\n";
    return 77;
  }
  return flags->with_precision(
      [&]<class Precision>() { return train_and_evaluate<Precision>(flags->epochs, flags->batch_size); });
}
