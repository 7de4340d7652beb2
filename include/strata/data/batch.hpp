#pragma once
// Batching and prefetching.
//
// A BatchStream walks one epoch of a BatchedDataset. Unshuffled batches are views of the
// dataset's storage (no copy); shuffled batches are gathered into buffers allocated once.
// With prefetch(depth), a background thread gathers up to `depth` batches ahead. A consumer
// that looks one batch ahead (the Trainer, so a device can copy the next batch while it
// computes this one) holds two batches at once.

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/core/random.hpp"
#include "strata/core/tensor.hpp"
#include "strata/data/dataset.hpp"

namespace strata::data {

// One global batch: `size` samples, columns of features and targets.
struct Batch {
  ConstMatrixView features;
  ConstMatrixView targets;
  int size = 0;
  std::int64_t index = 0;  // position of the batch within its epoch
};

// The visiting order of one epoch: identity, or a seeded Fisher-Yates permutation that
// depends only on (seed, epoch), the same on every platform.
inline std::vector<std::uint32_t> epoch_order(std::size_t n, std::optional<std::uint64_t> seed, std::int64_t epoch) {
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  if (!seed) return order;
  Rng rng(mix64(*seed, std::uint64_t(epoch)));
  for (std::size_t i = n; i > 1; --i) {
    auto const j = std::size_t((static_cast<unsigned __int128>(rng()) * i) >> 64);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

class BatchStream {
 public:
  // Starts at batch `first` of the epoch (a resumed run skips what it already trained).
  // `held`: how many of the latest batches stay valid at once (1, or 2 to look one ahead).
  BatchStream(Dataset data, int batch_size, int prefetch_depth, std::int64_t epoch, std::int64_t first = 0,
              int held = 1)
      : data_(std::move(data)), batch_size_(batch_size), order_(epoch_order(data_.size(), data_.shuffle_seed(), epoch)),
        batches_((std::int64_t(data_.size()) + batch_size - 1) / batch_size), gather_(data_.shuffle_seed().has_value()),
        first_(first), held_(held), consumed_(first), produced_(first), released_(first) {
    if (first < 0 || first > batches_)
      throw ConfigError(strata::detail::message("batch stream: first batch ", first, " is outside the epoch's 0..",
                                                batches_, " batches"));
    if (held < 1 || held > max_held)
      throw ConfigError(strata::detail::message("batch stream: held ", held, " must be 1 or 2 (batches valid at once)"));
    if (!gather_) return;
    slots_.resize(std::size_t(prefetch_depth) + std::size_t(held));
    for (auto& slot : slots_) {
      slot.features.resize(data_.feature_width(), batch_size);
      slot.targets.resize(data_.target_width(), batch_size);
    }
    if (prefetch_depth > 0) producer_ = std::thread([this] { produce(); });
  }
  BatchStream(BatchStream const&) = delete;
  BatchStream& operator=(BatchStream const&) = delete;
  ~BatchStream() {
    if (producer_.joinable()) {
      {
        std::lock_guard lock(mutex_);
        stop_ = true;
      }
      changed_.notify_all();
      producer_.join();
    }
  }

  [[nodiscard]] std::int64_t batches() const { return batches_; }

  // The next batch, or nullptr at the end of the epoch. The batch stays valid until `held`
  // more calls.
  Batch const* next() {
    if (consumed_ == batches_) return nullptr;
    std::int64_t const index = consumed_++;
    Batch& current = current_[std::size_t(index % held_)];
    if (!gather_) {
      int const first = int(index * batch_size_);
      int const size = std::min<int>(batch_size_, int(data_.size()) - first);
      current = {data_.features().columns(first, size), data_.targets().columns(first, size), size, index};
      return &current;
    }
    Slot& slot = slots_[std::size_t(index) % slots_.size()];
    if (!producer_.joinable()) {
      fill(slot, index);
    } else {
      std::unique_lock lock(mutex_);
      if (index - held_ >= first_) ++released_;  // the slot of the batch `held` calls back may be refilled now
      changed_.notify_all();
      changed_.wait(lock, [&] { return produced_ > index; });
    }
    current = {view(slot.features).columns(0, slot.size), view(slot.targets).columns(0, slot.size), slot.size, index};
    return &current;
  }

 private:
  struct Slot {
    Matrix features;
    Matrix targets;
    int size = 0;
  };

  void fill(Slot& slot, std::int64_t index) const {
    std::size_t const first = std::size_t(index) * std::size_t(batch_size_);
    int const size = int(std::min<std::size_t>(std::size_t(batch_size_), data_.size() - first));
    ConstMatrixView const x = data_.features(), y = data_.targets();
    for (int j = 0; j < size; ++j) {
      std::size_t const source = order_[first + std::size_t(j)];
      std::memcpy(slot.features.col(j).data(), x.data + source * std::size_t(x.rows), std::size_t(x.rows) * sizeof(float));
      std::memcpy(slot.targets.col(j).data(), y.data + source * std::size_t(y.rows), std::size_t(y.rows) * sizeof(float));
    }
    slot.size = size;
  }

  // Keeps `slots - held` batches ahead of the consumer, who holds the remaining `held` slots.
  void produce() {
    for (std::int64_t index = first_; index < batches_; ++index) {
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || index - released_ < std::int64_t(slots_.size()); });
        if (stop_) return;
      }
      fill(slots_[std::size_t(index) % slots_.size()], index);
      {
        std::lock_guard lock(mutex_);
        produced_ = index + 1;
      }
      changed_.notify_all();
    }
  }

  Dataset data_;
  int batch_size_;
  std::vector<std::uint32_t> order_;
  std::int64_t batches_;
  bool gather_;
  std::int64_t first_;
  static constexpr int max_held = 2;
  int held_;
  std::vector<Slot> slots_;
  std::int64_t consumed_;
  std::array<Batch, max_held> current_{};

  std::thread producer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::int64_t produced_;  // batches filled by the producer (the index after the last)
  std::int64_t released_;  // batches the consumer is done with (likewise)
  bool stop_ = false;
};

class BatchedDataset {
 public:
  BatchedDataset(Dataset data, int batch_size) : data_(std::move(data)), batch_size_(batch_size) {
    if (batch_size < 1)
      throw ConfigError(strata::detail::message("batch: global batch size ", batch_size, " must be at least 1"));
  }

  // Gather up to `depth` shuffled batches ahead on a background thread (tf.data's prefetch).
  [[nodiscard]] BatchedDataset prefetch(int depth = 1) const {
    if (depth < 0) throw ConfigError(strata::detail::message("prefetch: depth ", depth, " must be >= 0"));
    BatchedDataset b = *this;
    b.prefetch_depth_ = depth;
    return b;
  }

  [[nodiscard]] Dataset const& dataset() const { return data_; }
  [[nodiscard]] int batch_size() const { return batch_size_; }
  [[nodiscard]] int prefetch_depth() const { return prefetch_depth_; }
  [[nodiscard]] std::int64_t batches_per_epoch() const {
    return (std::int64_t(data_.size()) + batch_size_ - 1) / batch_size_;
  }

  // The batches of epoch `epoch` (the shuffle order depends on it), from batch `first` on;
  // `held` of them valid at once (BatchStream).
  [[nodiscard]] std::unique_ptr<BatchStream> stream(std::int64_t epoch, std::int64_t first = 0, int held = 1) const {
    return std::make_unique<BatchStream>(data_, batch_size_, prefetch_depth_, epoch, first, held);
  }

  // Range-for support; each loop over the same BatchedDataset is a new epoch (0, 1, 2, ...).
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(std::shared_ptr<BatchStream> stream) : stream_(std::move(stream)), batch_(stream_->next()) {}
    Batch const& operator*() const { return *batch_; }
    Batch const* operator->() const { return batch_; }
    Iterator& operator++() {
      batch_ = stream_->next();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(Iterator const& it, std::default_sentinel_t) { return it.batch_ == nullptr; }

   private:
    std::shared_ptr<BatchStream> stream_;
    Batch const* batch_ = nullptr;
  };
  [[nodiscard]] Iterator begin() const { return Iterator(stream(next_epoch_->fetch_add(1))); }
  [[nodiscard]] std::default_sentinel_t end() const { return {}; }

 private:
  Dataset data_;
  int batch_size_;
  int prefetch_depth_ = 0;
  std::shared_ptr<std::atomic<std::int64_t>> next_epoch_ = std::make_shared<std::atomic<std::int64_t>>(0);
};

inline BatchedDataset Dataset::batch(int global_batch_size) const { return {*this, global_batch_size}; }

}  // namespace strata::data
