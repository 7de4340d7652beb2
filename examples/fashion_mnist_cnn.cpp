// A convolutional network on Fashion-MNIST: the model of TensorFlow's "Distributed training
// with Keras" tutorial (Conv2D(32, 3) with ReLU, MaxPooling2D, Flatten, Dense(64) with ReLU,
// Dense(10)), trained with two synchronous replicas on the full training set and evaluated
// on the 10,000 test images. The last line is `test_accuracy=0.xxxx`.
//
//   fashion_mnist_cnn [--epochs N] [--batch-size B] [--precision fp32|bf16|fp16]
//
// A sample is one column of 28 x 28 x 1 pixels, channels last, as the images are read; a
// convolution's output is the same column layout as Keras' Flatten gives, so no Flatten
// layer appears.

#include <iostream>

#include <strata.hpp>

#include "command_line.hpp"

using Convolution = strata::Conv2D<strata::ImageShape{28, 28, 1}, 32, 3>;  // 26 x 26 x 32
using Pool = strata::MaxPool2D<Convolution::output_shape, 2>;              // 13 x 13 x 32
using Model = strata::Sequential<Convolution, strata::Relu, Pool, strata::Dense<Pool::output_shape.size(), 64>,
                                 strata::Relu, strata::Dense<64, 10>>;

template <class Precision>
int train_and_evaluate(int epochs, int batch_size) {
  auto const train = strata::data::fashion_mnist(strata::data::Split::train);
  auto const test = strata::data::fashion_mnist(strata::data::Split::test);
  Model model(/*seed=*/2026);

  strata::Trainer<strata::Mirrored<2>, Precision> trainer;
  std::cout << "Fashion-MNIST: " << train.size() << " training and " << test.size() << " test images; "
            << Model::name() << " (" << Model::parameter_count << " parameters) on " << trainer.num_replicas_in_sync()
            << " replicas, " << Precision::name() << "; GEMM: " << strata::cpu_gemm_engine() << "\n";

  auto const history = trainer.fit(model, strata::Adam{.lr = 1e-3f}, strata::SoftmaxCrossEntropy{}, train,
                                   {.epochs = epochs, .batch_size = batch_size, .validation = test, .seed = 7},
                                   strata::ProgressBar{});
  double total_seconds = 0.0;
  std::cout << "epoch_seconds=";  // training and validation, each epoch (benchmarks/anchors/cnn.py reads them)
  for (double s : history.epoch_seconds()) {
    std::cout << (total_seconds > 0.0 ? "," : "") << s;
    total_seconds += s;
  }
  auto const result = trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, test);
  std::cout << "\ntrained " << history.epochs() << " epochs in " << total_seconds << " s; test loss " << result.loss
            << '\n';
  std::cout << "test_accuracy=" << *result.accuracy << std::endl;
  return 0;
}

int main(int argc, char** argv) {
  auto const flags = examples::TrainingFlags::read(argc, argv, {.epochs = 3, .batch_size = 64});
  if (!flags) return 2;
  return flags->with_precision(
      [&]<class Precision>() { return train_and_evaluate<Precision>(flags->epochs, flags->batch_size); });
}
