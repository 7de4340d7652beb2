#pragma once
// Evaluator: distributed inference over a dataset — the mean loss and accuracy (evaluate)
// or the model's outputs (predict) — with each replica on its shard of every batch.

#include <cstdint>
#include <vector>

#include "strata/core/tensor.hpp"
#include "strata/data/batch.hpp"
#include "strata/nn/loss.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/replica_pass.hpp"

namespace strata::train {

template <class Config, class Model>
class Evaluator {
 public:
  using backend = typename strategy::BasicStrategy<Config>::backend;
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
    for_each_batch(data, [&](strategy::Shard const& shard, int r, auto& ws) {
      tallies[std::size_t(r)] += forward_shard<backend>(*model_, ws, model_->parameters().data(), loss, shard, {});
    });
    Tally total;
    for (auto const& t : tallies) total += t;
    Evaluation result;
    result.samples = total.samples;
    result.loss = total.loss_sum / double(total.samples);
    if constexpr (LossFn::reports_accuracy) result.accuracy = double(total.correct) / double(total.samples);
    return result;
  }

  // The model's outputs for every sample, output_width x size, in dataset order.
  Matrix predict(data::Dataset const& data) {
    Matrix out(Model::output_width, Eigen::Index(data.size()));
    std::int64_t batch_start = 0;
    for_each_batch(
        data,
        [&](strategy::Shard const& shard, int, auto& ws) {
          model_->template forward<backend>(ws, model_->parameters().data(), shard.features, {});
          out.middleCols(Eigen::Index(batch_start + shard.first_sample), shard.size) = strata::detail::eigen(ws.output());
        },
        &batch_start);
    return out;
  }

 private:
  // Calls fn(shard, replica, workspace) on every replica for every batch of `data`, in order.
  template <class Fn>
  void for_each_batch(data::Dataset const& data, Fn&& fn, std::int64_t* batch_start = nullptr) {
    Model::check_input_width(data.feature_width());
    auto stream = data.batch(batch_size_).stream(0);
    while (data::Batch const* batch = stream->next()) {
      strategy::DistributedBatch const distributed(*batch, num_replicas);
      auto task = [&](int r) { fn(distributed.shard(r), r, workspaces_[std::size_t(r)]); };
      group_->run(task);
      if (batch_start) *batch_start += batch->size;
    }
  }

  comm::ThreadGroup* group_;
  Model const* model_;
  int batch_size_;
  std::vector<typename Model::template Workspace<backend>> workspaces_;
};

}  // namespace strata::train
