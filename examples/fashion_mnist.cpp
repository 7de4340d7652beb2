// The flagship example: an MLP trained with two synchronous replicas on the full
// Fashion-MNIST training set (Debian's dataset-fashion-mnist), evaluated on the 10,000
// test images. The last line is `test_accuracy=0.xxxx`.
//
//   fashion_mnist [--epochs N] [--batch-size B] [--precision fp32|bf16|fp16]
//
// Each precision is its own trainer type, Trainer<Mirrored<2>, MixedPrecision> and so on,
// generated at compile time; the flag only picks which one runs.

#include <iostream>
#include <string>
#include <string_view>

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

  try {
    if (precision == "fp32") return train_and_evaluate<strata::FullPrecision>(epochs, batch_size);
    if (precision == "bf16") return train_and_evaluate<strata::MixedPrecision>(epochs, batch_size);
    if (precision == "fp16") return train_and_evaluate<strata::MixedPrecisionFp16>(epochs, batch_size);
    std::cerr << "--precision " << precision << " is not one of fp32, bf16, fp16\n";
    return 2;
  } catch (strata::Error const& error) {
    std::cerr << "error: " << error.what() << '\n';
    return 1;
  }
}
