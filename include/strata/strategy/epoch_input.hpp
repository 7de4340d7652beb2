#pragma once
// Input pass by pass, as a sequence of StepBatch: the global batches every worker reads
// and shards (SharedInput, TensorFlow's AutoShard::data), or each worker's own local
// batches of every step (WorkerInput, from PerWorker). fit's training loop (EpochStream:
// an epoch is one pass, or FitOptions::steps_per_epoch steps of pass after pass) and
// Strategy::distribute_datasets_from_function serve both from here.

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "strata/core/random.hpp"
#include "strata/data/batch.hpp"
#include "strata/data/dataset.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/worker_input.hpp"

namespace strata::strategy {

// One step's input: a batch, and where it sits in the step's global batch when it is one
// worker's local part of it (part.global_size == 0: it is the global batch).
struct StepBatch {
  data::Batch const* batch = nullptr;
  WorkerPart part{};
};

// The batches of one pass over the data from batch `first` on; a StepBatch returned by
// next() stays valid until the second call after it (the step looks one batch ahead).
class PassStream {
 public:
  // `local_sizes` (per-worker input): every worker's samples, this one's at `worker`.
  PassStream(std::unique_ptr<data::BatchStream> stream, std::int64_t first, std::int64_t batches,
              std::vector<std::int64_t> const* local_sizes = nullptr, int worker = 0, int local_batch = 0,
              data::Batch empty = {})
      : stream_(std::move(stream)), at_(first), batches_(batches), sizes_(local_sizes), worker_(worker),
        local_batch_(local_batch), empty_{empty, empty} {}

  [[nodiscard]] std::int64_t batches() const { return batches_; }

  StepBatch const* next() {
    if (at_ >= batches_) return nullptr;
    StepBatch& out = held_[std::size_t(at_ % 2)];
    if (!sizes_) {
      out = {stream_->next(), {}};
    } else {
      // Past the end of its own data, a worker takes part with an empty batch.
      data::Batch const* mine = part_size(worker_, at_) > 0 ? stream_->next() : nullptr;
      data::Batch& empty = empty_[std::size_t(at_ % 2)];  // one per held slot: each keeps its index
      empty.index = at_;
      out = {mine ? mine : &empty, part(at_)};
    }
    ++at_;
    return out.batch ? &out : nullptr;
  }

 private:
  // Samples of worker w's local batch at step s.
  [[nodiscard]] int part_size(int w, std::int64_t s) const {
    std::int64_t const left = (*sizes_)[std::size_t(w)] - s * local_batch_;
    return int(std::clamp<std::int64_t>(left, 0, local_batch_));
  }
  [[nodiscard]] WorkerPart part(std::int64_t s) const {
    WorkerPart p;
    for (int w = 0; w < int(sizes_->size()); ++w) {
      if (w < worker_) p.offset += part_size(w, s);
      p.global_size += part_size(w, s);
    }
    return p;
  }

  std::unique_ptr<data::BatchStream> stream_;
  std::int64_t at_;
  std::int64_t batches_;
  std::vector<std::int64_t> const* sizes_;
  int worker_;
  int local_batch_;
  std::array<data::Batch, 2> empty_;
  std::array<StepBatch, 2> held_{};
};

// Steps in an epoch: FitOptions::steps_per_epoch when set (> 0), else a pass's.
[[nodiscard]] inline std::int64_t steps_in_epoch(std::int64_t steps_per_epoch, std::int64_t batches_per_pass) {
  return steps_per_epoch > 0 ? steps_per_epoch : batches_per_pass;
}

// The steps of one epoch of fit, from step `first` of it on. An epoch is one pass over the
// data, or, given steps_per_epoch S, steps [e*S, (e+1)*S) of the endless sequence of passes,
// each shuffled afresh (pass p in the order epoch p has without S): it may begin and end
// inside a pass, as Keras' epochs over a repeated dataset do. A StepBatch returned by next()
// stays valid until the second call after it; its batch's index is its step in the epoch.
class EpochStream {
 public:
  // `input`: SharedInput or WorkerInput, which must outlive the stream.
  template <class Input>
  EpochStream(Input const& input, std::int64_t steps_per_epoch, std::int64_t epoch, std::int64_t first)
      : open_([&input](std::int64_t pass, std::int64_t from) { return input.pass(pass, from); }),
        per_pass_(input.batches_per_pass()), steps_(steps_in_epoch(steps_per_epoch, per_pass_)),
        origin_(epoch * steps_), at_(origin_ + first) {}

  [[nodiscard]] std::int64_t batches() const { return steps_; }

  StepBatch const* next() {
    if (at_ >= origin_ + steps_) return nullptr;
    std::int64_t const pass = at_ / per_pass_;
    if (!current_ || pass != pass_) {
      previous_ = std::move(current_);  // holds the batch handed out last, valid until the next call
      current_.emplace(open_(pass, at_ % per_pass_));
      pass_ = pass;
    } else {
      previous_.reset();
    }
    StepBatch const* step = current_->next();
    if (!step) return nullptr;
    std::size_t const slot = std::size_t(at_ % 2);
    views_[slot] = *step->batch;
    views_[slot].index = at_ - origin_;
    held_[slot] = {&views_[slot], step->part};
    ++at_;
    return &held_[slot];
  }

 private:
  std::function<PassStream(std::int64_t, std::int64_t)> open_;
  std::int64_t per_pass_;
  std::int64_t steps_;
  std::int64_t origin_;  // the epoch's first step in the sequence of passes
  std::int64_t at_;
  std::int64_t pass_ = -1;
  std::optional<PassStream> current_, previous_;
  std::array<data::Batch, 2> views_{};
  std::array<StepBatch, 2> held_{};
};

// Every worker reads the same global batches (in one process: the only kind there is).
class SharedInput {
 public:
  SharedInput(data::Dataset const& data, int batch_size, bool shuffle, std::uint64_t seed, int prefetch)
      : batches_((shuffle ? data.shuffle(seed) : data).batch(batch_size).prefetch(prefetch)) {}

  [[nodiscard]] std::int64_t batches_per_pass() const { return batches_.batches_per_epoch(); }
  // Pass `pass` (its shuffle order depends on it) from batch `first` on.
  [[nodiscard]] PassStream pass(std::int64_t pass, std::int64_t first) const {
    return {batches_.stream(pass, first, 2), first, batches_per_pass()};
  }

 private:
  data::BatchedDataset batches_;
};

// This worker's own data, in local batches of batch_size / workers; a pass has as many
// steps as the worker with the most data needs.
class WorkerInput {
 public:
  WorkerInput(data::Dataset const& local, std::vector<std::int64_t> sizes, int worker, int local_batch, bool shuffle,
              std::uint64_t seed, int prefetch)
      : batches_((shuffle ? local.shuffle(mix64(seed, std::uint64_t(worker))) : local).batch(local_batch).prefetch(prefetch)),
        sizes_(std::move(sizes)), worker_(worker), local_batch_(local_batch) {
    for (auto n : sizes_) steps_ = std::max(steps_, (n + local_batch - 1) / local_batch);
  }

  [[nodiscard]] std::int64_t batches_per_pass() const { return steps_; }
  [[nodiscard]] PassStream pass(std::int64_t pass, std::int64_t first) const {
    std::int64_t const mine = batches_.batches_per_epoch();
    data::Batch const empty{{nullptr, feature_width(), 0}, {nullptr, target_width(), 0}, 0, 0};
    return {batches_.stream(pass, std::min(first, mine), 2), first, steps_, &sizes_, worker_, local_batch_, empty};
  }

 private:
  [[nodiscard]] int feature_width() const { return batches_.dataset().feature_width(); }
  [[nodiscard]] int target_width() const { return batches_.dataset().target_width(); }

  data::BatchedDataset batches_;
  std::vector<std::int64_t> sizes_;
  int worker_;
  int local_batch_;
  std::int64_t steps_ = 0;
};

// Strategy::distribute_datasets_from_function: this worker's local batches as the replicas
// see them; each loop over it is the next epoch (0, 1, 2, ...).
class WorkerDistributedDataset {
 public:
  WorkerDistributedDataset(WorkerInput input, int num_replicas, int local_replicas, int first_replica)
      : input_(std::move(input)), num_replicas_(num_replicas), local_replicas_(local_replicas), first_(first_replica) {}

  class Iterator {
   public:
    using value_type = DistributedBatch;
    using difference_type = std::ptrdiff_t;
    Iterator(PassStream stream, WorkerDistributedDataset const& owner)
        : stream_(std::make_unique<PassStream>(std::move(stream))), owner_(&owner), current_(stream_->next()) {}
    DistributedBatch operator*() const {
      return {*current_->batch, owner_->num_replicas_, owner_->local_replicas_, owner_->first_, current_->part};
    }
    Iterator& operator++() {
      current_ = stream_->next();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(Iterator const& it, std::default_sentinel_t) { return it.current_ == nullptr; }

   private:
    std::unique_ptr<PassStream> stream_;
    WorkerDistributedDataset const* owner_;
    StepBatch const* current_;
  };

  [[nodiscard]] Iterator begin() const { return {input_.pass(epoch_++, 0), *this}; }
  [[nodiscard]] std::default_sentinel_t end() const { return {}; }
  // Steps per epoch: the same on every worker.
  [[nodiscard]] std::int64_t batches_per_epoch() const { return input_.batches_per_pass(); }

 private:
  WorkerInput input_;
  int num_replicas_;
  int local_replicas_;
  int first_;
  mutable std::int64_t epoch_ = 0;
};

}  // namespace strata::strategy
