#pragma once
// Splitting a global batch into per-replica shards (TensorFlow's semantics: each replica
// takes batch / num_replicas samples; the first batch % num_replicas replicas take one
// more). Shards are contiguous column blocks of the batch: no copy, no sample lost or
// counted twice, whatever the remainder.

#include <cstdint>

#include "strata/core/error.hpp"
#include "strata/core/tensor.hpp"
#include "strata/data/batch.hpp"
#include "strata/strategy/worker_input.hpp"

namespace strata::strategy {

// One replica's part of a global batch.
struct Shard {
  ConstMatrixView features;
  ConstMatrixView targets;
  int size = 0;               // samples in this shard (may be 0 in a last batch smaller than the replicas)
  int first_sample = 0;       // index of its first sample within the global batch
  int global_batch_size = 0;  // samples in the whole global batch
  int replica = 0;
};

struct ShardRange {
  int first = 0;
  int count = 0;
};

constexpr ShardRange shard_range(int batch_size, int num_replicas, int replica) {
  int const base = batch_size / num_replicas;
  int const extra = batch_size % num_replicas;
  return {replica * base + (replica < extra ? replica : extra), base + (replica < extra ? 1 : 0)};
}

// The largest shard any replica gets from a global batch of `batch_size`.
constexpr int max_shard_size(int batch_size, int num_replicas) {
  return (batch_size + num_replicas - 1) / num_replicas;
}

// A global batch as the replicas see it: the whole batch (each process holds all of it), or
// with per-worker input one process's local part of it.
class DistributedBatch {
 public:
  DistributedBatch(data::Batch const& batch, int num_replicas)
      : batch_(&batch), num_replicas_(num_replicas), local_replicas_(num_replicas) {}
  // `batch` is one worker's local part (`part`) of the step's global batch, split over its
  // `local_replicas`, the first of which is replica `first_replica` of `num_replicas`.
  DistributedBatch(data::Batch const& batch, int num_replicas, int local_replicas, int first_replica, WorkerPart part)
      : batch_(&batch), num_replicas_(num_replicas), local_replicas_(local_replicas), first_(first_replica), part_(part) {}

  // The batch this process holds: the global batch, or its local part of it.
  [[nodiscard]] data::Batch const& global() const { return *batch_; }
  // Samples in the step's global batch, over every worker.
  [[nodiscard]] int size() const { return part_.global_size > 0 ? part_.global_size : batch_->size; }
  [[nodiscard]] int num_replicas() const { return num_replicas_; }
  // Replica `replica`'s shard (its job-wide index; one of this process's).
  [[nodiscard]] Shard shard(int replica) const {
    ShardRange const r = shard_range(batch_->size, local_replicas_, replica - first_);
    Shard s{batch_->features.columns(r.first, r.count), batch_->targets.columns(r.first, r.count), r.count, r.first,
            batch_->size, replica};
    if (part_.global_size > 0) {  // where it sits in the step's global batch
      s.first_sample += part_.offset;
      s.global_batch_size = part_.global_size;
    }
    return s;
  }

 private:
  data::Batch const* batch_;
  int num_replicas_;
  int local_replicas_;
  int first_ = 0;
  WorkerPart part_{};
};

inline void check_global_batch(int batch_size, int num_replicas) {
  if (batch_size < num_replicas)
    throw ConfigError(strata::detail::message("global batch size ", batch_size, " is smaller than the ", num_replicas,
                                      " replicas in sync; every replica needs at least one sample per batch: use a "
                                      "batch size of at least ",
                                      num_replicas));
}

// `strategy.distribute(dataset.batch(n))`: iterates the batches as DistributedBatch values.
class DistributedDataset {
 public:
  DistributedDataset(data::BatchedDataset batches, int num_replicas)
      : batches_(std::move(batches)), num_replicas_(num_replicas) {
    check_global_batch(batches_.batch_size(), num_replicas_);
  }

  class Iterator {
   public:
    using value_type = DistributedBatch;
    using difference_type = std::ptrdiff_t;
    Iterator(data::BatchedDataset::Iterator it, int n) : it_(std::move(it)), num_replicas_(n) {}
    DistributedBatch operator*() const { return {*it_, num_replicas_}; }
    Iterator& operator++() {
      ++it_;
      return *this;
    }
    void operator++(int) { ++it_; }
    friend bool operator==(Iterator const& it, std::default_sentinel_t s) { return it.it_ == s; }

   private:
    data::BatchedDataset::Iterator it_;
    int num_replicas_;
  };

  [[nodiscard]] Iterator begin() const { return {batches_.begin(), num_replicas_}; }
  [[nodiscard]] std::default_sentinel_t end() const { return {}; }
  [[nodiscard]] data::BatchedDataset const& batches() const { return batches_; }

 private:
  data::BatchedDataset batches_;
  int num_replicas_;
};

}  // namespace strata::strategy
