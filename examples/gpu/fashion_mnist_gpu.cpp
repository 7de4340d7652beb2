// The flagship model on a GPU: Trainer<Mirrored<2>, Cuda, Precision>, two logical replicas
// on device 0, on the full Fashion-MNIST. Without a GPU it says so and exits 77.
//
//   fashion_mnist_gpu [--epochs N] [--batch-size B] [--precision fp32|bf16|fp16]

#include <iostream>
#include <string>
#include <string_view>

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
  int epochs = 10;
  int batch_size = 128;
  std::string precision = "fp32";
  bool const taken = examples::read_flags(argc, argv, "--epochs N --batch-size B --precision fp32|bf16|fp16",
                                          [&](std::string_view flag, examples::FlagValue value) {
                                            if (flag == "--epochs") epochs = value.number<int>();
                                            else if (flag == "--batch-size") batch_size = value.number<int>();
                                            else if (flag == "--precision") precision = value.text();
                                            else return false;
                                            return true;
                                          });
  if (!taken) return 2;
  if (strata::cuda::device_count() == 0) {
    std::cout << "SKIPPED: no CUDA device here; this example needs an NVIDIA GPU\n";
    return 77;
  }
  try {
    if (precision == "fp32") return train_and_evaluate<strata::FullPrecision>(epochs, batch_size);
    if (precision == "bf16") return train_and_evaluate<strata::MixedPrecision>(epochs, batch_size);
    if (precision == "fp16") return train_and_evaluate<strata::MixedPrecisionFp16>(epochs, batch_size);
    std::cerr << "--precision " << precision << " is not one of fp32, bf16, fp16\n";
    return 2;
  } catch (strata::Error const& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
}
