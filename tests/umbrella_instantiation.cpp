// Instantiates every public template once, so the warning tests see all of strata's code.
#include "strata.hpp"

using Model = strata::Sequential<strata::Dense<8, 16, strata::HeUniform>, strata::Relu, strata::Dropout,
                                 strata::Dense<16, 16>, strata::Tanh, strata::Dense<16, 8>, strata::Gelu,
                                 strata::Dense<8, 3>>;

template <class Trainer, class Optimizer, class Loss>
void train_once(strata::Dataset const& data, Optimizer optimizer, Loss loss) {
  Trainer trainer;
  Model model(1);
  strata::CsvLogger csv("/dev/null");
  trainer.fit(model, optimizer, loss, data, {.epochs = 1, .batch_size = 4, .validation = data}, strata::ProgressBar{},
              strata::EarlyStopping{.monitor = "loss"}, csv, strata::BackupAndRestore{.directory = "/tmp/backup"},
              strata::ModelCheckpoint{.directory = "/tmp/ckpt", .save_best_only = true, .monitor = "val_loss"});
  strata::save_checkpoint("/tmp/model.safetensors", model);
  strata::load_checkpoint("/tmp/model.safetensors", model);
  (void)trainer.evaluate(model, loss, data);
  (void)trainer.predict(model, data);
}

int main() {
  strata::Dataset labels(strata::Matrix::Random(8, 10), std::vector<std::int32_t>(10, 2));
  strata::Dataset targets(strata::Matrix::Random(8, 10), strata::Matrix::Random(3, 10));
  train_once<strata::Trainer<>>(labels, strata::Sgd{.momentum = 0.9f, .nesterov = true}, strata::SoftmaxCrossEntropy{});
  train_once<strata::Trainer<strata::Mirrored<2>, strata::GradAccum<2>>>(labels, strata::Adam{}, strata::SoftmaxCrossEntropy{});
  train_once<strata::Trainer<strata::Mirrored<3>>>(targets, strata::AdamW{}, strata::MeanSquaredError{});

  using Cnn = strata::Sequential<strata::Conv2D<strata::ImageShape{4, 4, 2}, 3, 3, strata::Padding::same>, strata::Relu,
                                 strata::MaxPool2D<strata::ImageShape{4, 4, 3}, 2>, strata::Dense<12, 3>>;
  strata::Dataset images(strata::Matrix::Random(32, 10), std::vector<std::int32_t>(10, 2));
  Cnn cnn(1);
  strata::Trainer<strata::Mirrored<2>, strata::MixedPrecision> cnn_trainer;
  cnn_trainer.fit(cnn, strata::Adam{}, strata::SoftmaxCrossEntropy{}, images, {.epochs = 1, .batch_size = 4});
  using Strided = strata::Conv2D<strata::ImageShape{4, 4, 2}, 4, 3, strata::Padding::same, 2>;  // 2 x 2 x 4
  using Pooled = strata::AveragePooling2D<strata::ImageShape{4, 4, 2}, 2>;
  strata::Sequential<Pooled, strata::Dense<8, 32>, Strided, strata::GlobalAveragePooling2D<Strided::output_shape>,
                     strata::Dense<4, 3>>
      strided(2);
  cnn_trainer.fit(strided, strata::Adam{}, strata::SoftmaxCrossEntropy{}, images, {.epochs = 1, .batch_size = 4});
  using Dilated = strata::Conv2D<strata::ImageShape{4, 4, 2}, 3, 2, strata::Padding::same, 1, 2>;  // 4 x 4 x 3
  using SamePool = strata::MaxPool2D<Dilated::output_shape, 3, 2, strata::Padding::same>;         // 2 x 2 x 3
  strata::Sequential<Dilated, SamePool, strata::AveragePooling2D<SamePool::output_shape, 3, 1, strata::Padding::same>,
                     strata::Dense<12, 3>>
      dilated(3);
  cnn_trainer.fit(dilated, strata::Adam{}, strata::SoftmaxCrossEntropy{}, images, {.epochs = 1, .batch_size = 4});

  strata::Strategy<strata::Mirrored<2>> strategy;
  for (auto const& batch : strategy.distribute(labels.batch(4))) {
    auto sizes = strategy.run([](strata::ReplicaContext& ctx, strata::Shard const& shard) {
      float value = float(shard.size);
      ctx.all_reduce(std::span<float>(&value, 1), strata::ReduceOp::sum);
      return value;
    }, batch);
    (void)strategy.reduce(strata::ReduceOp::mean, sizes);
    (void)strategy.gather(sizes);
  }
}
