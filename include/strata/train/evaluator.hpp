#pragma once
// Evaluator: distributed inference over a dataset — the mean loss and accuracy (evaluate)
// or the model's outputs (predict) — with each replica's ReplicaPass on its shard of every
// batch, on any device (a device copies the next shard while this one computes). Under
// mixed precision it computes as training does: on the weights rounded to the compute type,
// with 16-bit activations.

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "strata/comm/thread_group.hpp"
#include "strata/core/aligned_buffer.hpp"
#include "strata/core/dtype.hpp"
#include "strata/core/tensor.hpp"
#include "strata/data/batch.hpp"
#include "strata/nn/loss.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/replica_pass.hpp"

namespace strata::train {

// The mean loss (and accuracy, for classification losses) of the replicas' tallies together.
template <class LossFn, std::size_t N>
Evaluation summarize(std::array<Tally, N> const& tallies) {
  Tally total;
  for (auto const& t : tallies) total += t;
  Evaluation result;
  result.samples = total.samples;
  result.loss = total.loss_sum / double(total.samples);
  if constexpr (LossFn::reports_accuracy) result.accuracy = double(total.correct) / double(total.samples);
  return result;
}

// Calls fn(shard, next, replica) on every replica, in the group's threads, for every batch
// of `data` in order. `next` is the replica's shard of the following batch (nullptr after the
// last), which a device evaluator copies while it computes this one. *batch_start, when
// given, is the index of the current batch's first sample.
template <class Fn>
void for_each_shard(comm::ThreadGroup& group, data::Dataset const& data, int batch_size, int num_replicas, Fn&& fn,
                    std::int64_t* batch_start = nullptr) {
  auto stream = data.batch(batch_size).stream(0, 0, 2);
  for (data::Batch const *batch = stream->next(), *next = nullptr; batch; batch = next) {
    next = stream->next();
    strategy::DistributedBatch const distributed(*batch, num_replicas);
    auto task = [&](int r) {
      if (!next) return fn(distributed.shard(r), nullptr, r);
      strategy::Shard const following = strategy::DistributedBatch(*next, num_replicas).shard(r);
      fn(distributed.shard(r), &following, r);
    };
    group.run(task);
    if (batch_start) *batch_start += batch->size;
  }
}

template <class Config, class Model>
class Evaluator {
 public:
  using device = typename Config::device;
  using compute_type = typename Config::precision::compute_type;
  using Pass = ReplicaPass<Model, device, compute_type>;
  static constexpr int num_replicas = Config::num_replicas;

  Evaluator(strategy::BasicStrategy<Config>& strategy, Model const& model, int global_batch_size)
      : group_(&strategy.group()), model_(&model), batch_size_(global_batch_size),
        weights_(model.parameters(), num_replicas) {
    strategy::check_global_batch(global_batch_size, num_replicas);
    int const shard = strategy::max_shard_size(global_batch_size, num_replicas);
    passes_.reserve(num_replicas);
    for (int r = 0; r < num_replicas; ++r) passes_.emplace_back(shard, weights_.device_of(r));
  }

  // Mean loss (and accuracy for classification losses) over every sample of `data`.
  template <nn::Loss LossFn>
  Evaluation evaluate(LossFn const& loss, data::Dataset const& data) {
    std::array<Tally, num_replicas> tallies{};
    weights_.refresh(0, Model::arena_size);
    for_each_batch(data, [&](Pass& pass, int r, strategy::Shard const& shard, bool staged, strategy::Shard const* next) {
      tallies[std::size_t(r)] += pass.evaluate(*model_, weights_(r), loss, shard, staged, next);
    });
    return summarize<LossFn>(tallies);
  }

  // The model's outputs for every sample, output_width x size, in dataset order.
  Matrix predict(data::Dataset const& data) {
    Matrix out(Model::output_width, Eigen::Index(data.size()));
    std::int64_t batch_start = 0;
    weights_.refresh(0, Model::arena_size);
    for_each_batch(
        data,
        [&](Pass& pass, int r, strategy::Shard const& shard, bool staged, strategy::Shard const* next) {
          float* const columns = out.data() + (batch_start + shard.first_sample) * Model::output_width;
          pass.predict(*model_, weights_(r), shard, staged, next, columns);
        },
        &batch_start);
    return out;
  }

 private:
  // Calls fn(pass, replica, shard, staged, next) on every replica for every batch of `data`,
  // in order: `staged` says the replica's pass copied this shard ahead during the previous
  // batch, `next` is its shard of the following batch (nullptr after the last).
  template <class Fn>
  void for_each_batch(data::Dataset const& data, Fn&& fn, std::int64_t* batch_start = nullptr) {
    Model::check_input_width(data.feature_width());
    std::array<bool, num_replicas> staged{};
    for_each_shard(
        *group_, data, batch_size_, num_replicas,
        [&](strategy::Shard const& shard, strategy::Shard const* next, int r) {
          Pass& pass = passes_[std::size_t(r)];
          [[maybe_unused]] auto const bound = pass.bind();
          fn(pass, r, shard, staged[std::size_t(r)], next);
          staged[std::size_t(r)] = Pass::copies_ahead && next != nullptr;
        },
        batch_start);
  }

  comm::ThreadGroup* group_;
  Model const* model_;
  int batch_size_;
  ReplicaWeights<device, compute_type> weights_;  // what the forward passes read
  std::vector<Pass> passes_;
};

}  // namespace strata::train
