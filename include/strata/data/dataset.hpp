#pragma once
// Dataset: an immutable, shared table of samples (features and targets, one column per
// sample) and cheap views of it. Copies, take/skip and shuffle share the storage.
//
//   auto train = strata::data::fashion_mnist(strata::data::Split::train);
//   for (auto const& batch : train.shuffle(42).batch(256)) ...

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/core/tensor.hpp"

namespace strata::data {

class BatchedDataset;

class Dataset {
 public:
  Dataset() = default;

  // features: width x n; targets: target_width x n (class labels are one row of integers).
  Dataset(Matrix features, Matrix targets) {
    if (features.cols() != targets.cols())
      throw ShapeError(strata::detail::message("Dataset: ", features.cols(), " feature columns but ", targets.cols(),
                                       " target columns; give one target column per sample"));
    count_ = std::size_t(features.cols());
    storage_ = std::make_shared<Storage const>(Storage{std::move(features), std::move(targets)});
  }

  // Integer class labels, one per sample.
  Dataset(Matrix features, std::vector<std::int32_t> const& labels)
      : Dataset(std::move(features), labels_row(labels)) {}

  [[nodiscard]] std::size_t size() const { return count_; }
  [[nodiscard]] bool empty() const { return count_ == 0; }
  [[nodiscard]] int feature_width() const { return storage_ ? int(storage_->features.rows()) : 0; }
  [[nodiscard]] int target_width() const { return storage_ ? int(storage_->targets.rows()) : 0; }
  [[nodiscard]] std::optional<std::uint64_t> shuffle_seed() const { return shuffle_seed_; }

  // All samples of this view, in storage order.
  [[nodiscard]] ConstMatrixView features() const { return storage_ ? columns(storage_->features) : ConstMatrixView{}; }
  [[nodiscard]] ConstMatrixView targets() const { return storage_ ? columns(storage_->targets) : ConstMatrixView{}; }

  // The first n samples / all but the first n in storage order (clamped, as tf.data does);
  // a shuffle applies to what remains.
  [[nodiscard]] Dataset take(std::size_t n) const {
    Dataset d = *this;
    d.count_ = std::min(n, count_);
    return d;
  }
  [[nodiscard]] Dataset skip(std::size_t n) const {
    Dataset d = *this;
    n = std::min(n, count_);
    d.first_ += n;
    d.count_ -= n;
    return d;
  }

  // Visit samples in a fresh seeded order every epoch (tf.data's reshuffle_each_iteration).
  [[nodiscard]] Dataset shuffle(std::uint64_t seed) const {
    Dataset d = *this;
    d.shuffle_seed_ = seed;
    return d;
  }

  // Global batches of `global_batch_size`; the last batch of an epoch holds the remainder.
  [[nodiscard]] BatchedDataset batch(int global_batch_size) const;

 private:
  struct Storage {
    Matrix features;
    Matrix targets;
  };

  static Matrix labels_row(std::vector<std::int32_t> const& labels) {
    Matrix row(1, Eigen::Index(labels.size()));
    for (std::size_t i = 0; i < labels.size(); ++i) row(0, Eigen::Index(i)) = float(labels[i]);
    return row;
  }
  [[nodiscard]] ConstMatrixView columns(Matrix const& m) const {
    if (count_ == 0) return {m.data(), int(m.rows()), 0};
    return ConstMatrixView{m.data(), int(m.rows()), int(m.cols())}.columns(int(first_), int(count_));
  }

  std::shared_ptr<Storage const> storage_;
  std::size_t first_ = 0;
  std::size_t count_ = 0;
  std::optional<std::uint64_t> shuffle_seed_;
};

}  // namespace strata::data
