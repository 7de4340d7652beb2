// The flagship example: an MLP trained with two synchronous replicas on the full
// Fashion-MNIST training set (Debian's dataset-fashion-mnist), evaluated on the 10,000
// test images. The last line is `test_accuracy=0.xxxx`.
//
//   fashion_mnist [--epochs N] [--batch-size B]

#include <cstdlib>
#include <iostream>
#include <string>

#include <strata.hpp>

int main(int argc, char** argv) {
  int epochs = 10;
  int batch_size = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const flag = argv[i];
    if (flag == "--epochs") epochs = std::atoi(argv[i + 1]);
    else if (flag == "--batch-size") batch_size = std::atoi(argv[i + 1]);
    else {
      std::cerr << "unknown flag " << flag << "; use --epochs N --batch-size B\n";
      return 2;
    }
  }

  try {
    auto const train = strata::data::fashion_mnist(strata::data::Split::train);
    auto const test = strata::data::fashion_mnist(strata::data::Split::test);

    using Model = strata::Sequential<strata::Dense<784, 256>, strata::Relu, strata::Dense<256, 10>>;
    Model model(/*seed=*/2026);

    strata::Trainer<strata::Mirrored<2>> trainer;
    std::cout << "Fashion-MNIST: " << train.size() << " training and " << test.size() << " test images; "
              << Model::name() << " (" << Model::parameter_count << " parameters) on "
              << trainer.num_replicas_in_sync() << " replicas\n";

    auto const history = trainer.fit(model, strata::Adam{.lr = 1e-3f}, strata::SoftmaxCrossEntropy{}, train,
                                     {.epochs = epochs, .batch_size = batch_size, .validation = test, .seed = 7},
                                     strata::ProgressBar{});
    double total_seconds = 0.0;
    for (double s : history.epoch_seconds()) total_seconds += s;
    auto const result = trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, test);
    std::cout << "trained " << history.epochs() << " epochs in " << total_seconds << " s; test loss " << result.loss
              << '\n';
    std::cout << "test_accuracy=" << *result.accuracy << std::endl;
  } catch (strata::Error const& error) {
    std::cerr << "error: " << error.what() << '\n';
    return 1;
  }
}
