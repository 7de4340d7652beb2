#pragma once
// Evaluator: distributed inference over a dataset — the mean loss and accuracy (evaluate)
// or the model's outputs (predict) — with each replica on its shard of every batch. Under
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
  using backend = typename strategy::BasicStrategy<Config>::backend;
  using compute_type = typename Config::precision::compute_type;
  static constexpr int num_replicas = Config::num_replicas;

  Evaluator(strategy::BasicStrategy<Config>& strategy, Model const& model, int global_batch_size)
      : group_(&strategy.group()), model_(&model), batch_size_(global_batch_size) {
    strategy::check_global_batch(global_batch_size, num_replicas);
    workspaces_.reserve(num_replicas);
    for (int r = 0; r < num_replicas; ++r)
      workspaces_.emplace_back(strategy::max_shard_size(global_batch_size, num_replicas));
  }

  // Mean loss (and accuracy for classification losses) over every sample of `data`.
  template <nn::Loss LossFn>
  Evaluation evaluate(LossFn const& loss, data::Dataset const& data) {
    std::array<Tally, num_replicas> tallies{};
    float const* params = weights();
    for_each_batch(data, [&](strategy::Shard const& shard, int r, auto& ws) {
      tallies[std::size_t(r)] += forward_shard<backend>(*model_, ws, params, loss, shard, {});
    });
    return summarize<LossFn>(tallies);
  }

  // The model's outputs for every sample, output_width x size, in dataset order.
  Matrix predict(data::Dataset const& data) {
    Matrix out(Model::output_width, Eigen::Index(data.size()));
    std::int64_t batch_start = 0;
    float const* params = weights();
    for_each_batch(
        data,
        [&](strategy::Shard const& shard, int, auto& ws) {
          model_->template forward<backend>(ws, params, shard.features, {});
          out.middleCols(Eigen::Index(batch_start + shard.first_sample), shard.size) = strata::detail::eigen(ws.output());
        },
        &batch_start);
    return out;
  }

 private:
  // The weights the forward pass reads: the model's, or a copy rounded to the compute type.
  float const* weights() {
    if constexpr (std::is_same_v<compute_type, float>) {
      return model_->parameters().data();
    } else {
      if (rounded_.size() == 0) rounded_ = AlignedBuffer(Model::arena_size);
      std::copy(model_->parameters().begin(), model_->parameters().end(), rounded_.data());
      round_to<compute_type>(rounded_.data(), Model::arena_size);
      return rounded_.data();
    }
  }

  // Calls fn(shard, replica, workspace) on every replica for every batch of `data`, in order.
  template <class Fn>
  void for_each_batch(data::Dataset const& data, Fn&& fn, std::int64_t* batch_start = nullptr) {
    Model::check_input_width(data.feature_width());
    for_each_shard(
        *group_, data, batch_size_, num_replicas,
        [&](strategy::Shard const& shard, strategy::Shard const*, int r) { fn(shard, r, workspaces_[std::size_t(r)]); },
        batch_start);
  }

  comm::ThreadGroup* group_;
  Model const* model_;
  int batch_size_;
  std::vector<typename Model::template Workspace<backend, compute_type>> workspaces_;
  AlignedBuffer rounded_;
};

}  // namespace strata::train
