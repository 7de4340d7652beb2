#pragma once
// StepRunner: the training step generated for one (policies, model, optimizer, loss).
//
// Per global batch, every replica runs forward and backward on its shard into its own
// gradient arena (the first replica uses the model's). After K micro-batches (GradAccum<K>),
// each replica reduces its owned slice of the arena across all replicas — summing in
// replica order, scaled by 1/samples — in cache-sized chunks, and applies the optimizer to
// that slice of the single shared copy of the weights while the chunk is still in cache.
// No allocation, lock or type-erased call happens inside a step.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_group.hpp"
#include "strata/core/aligned_buffer.hpp"
#include "strata/core/random.hpp"
#include "strata/data/batch.hpp"
#include "strata/nn/loss.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/train/replica_pass.hpp"

namespace strata::train {

template <class Config, class Model, optim::Optimizer Opt, nn::Loss LossFn>
class StepRunner {
 public:
  using backend = typename strategy::BasicStrategy<Config>::backend;
  static constexpr int num_replicas = Config::num_replicas;
  static constexpr int accumulation_steps = Config::accumulation_steps;
  static constexpr std::size_t chunk_floats = 2048;  // 8 KiB: reduced and updated while in L1

  // `global_batch_size` bounds the batches this runner takes (shards are sized for it).
  StepRunner(strategy::BasicStrategy<Config>& strategy, Model& model, Opt const& optimizer, LossFn const& loss,
             int global_batch_size, std::uint64_t seed)
      : group_(&strategy.group()), model_(&model), optimizer_(optimizer), loss_(loss),
        state_(optimizer.make_state(Model::arena_size)), seed_(seed) {
    optimizer_.validate();
    strategy::check_global_batch(global_batch_size, num_replicas);
    int const shard = strategy::max_shard_size(global_batch_size, num_replicas);
    max_batch_ = global_batch_size;
    workspaces_.reserve(num_replicas);
    for (int r = 0; r < num_replicas; ++r) {
      workspaces_.emplace_back(shard);
      scratch_[std::size_t(r)] = AlignedBuffer(chunk_floats);
    }
    gradients_[0] = model.gradients().data();
    for (int r = 1; r < num_replicas; ++r) {
      replica_gradients_[std::size_t(r)] = AlignedBuffer(Model::arena_size);
      gradients_[std::size_t(r)] = replica_gradients_[std::size_t(r)].data();
    }
  }

  // One global batch (one micro-batch under GradAccum<K>). Returns the summed loss and
  // correct counts over its samples. The optimizer runs after every K-th batch.
  Tally train_on_batch(data::Batch const& batch) {
    if (batch.size > max_batch_ || batch.size < 1)
      throw ConfigError(strata::detail::message("StepRunner: a batch of ", batch.size,
                                                " samples; this runner was built for global batches of 1..", max_batch_));
    bool const accumulate = micro_ > 0;
    bool const apply = micro_ + 1 == accumulation_steps;
    samples_in_group_ += batch.size;
    if (apply) ++step_;
    std::uint64_t const dropout_seed = mix64(seed_, std::uint64_t(micro_batches_seen_++));
    strategy::DistributedBatch const distributed(batch, num_replicas);
    auto task = [&](int r) {
      strategy::Shard const shard = distributed.shard(r);
      auto& ws = workspaces_[std::size_t(r)];
      float const* params = model_->parameters().data();
      tallies_[std::size_t(r)] =
          forward_shard<backend>(*model_, ws, params, loss_, shard, {true, dropout_seed, shard.first_sample});
      model_->template backward<backend>(ws, params, gradients_[std::size_t(r)], shard.features, accumulate);
      if (apply) {
        group_->barrier(r);  // every replica's gradients are complete
        update_owned_slice(r);
      }
    };
    group_->run(task);
    micro_ = apply ? 0 : micro_ + 1;
    if (apply) samples_in_group_ = 0;
    Tally total;
    for (auto const& t : tallies_) total += t;
    return total;
  }

  // Applies the optimizer to a partial accumulation group (fewer than K micro-batches, at the
  // end of an epoch), so no sample's gradient is dropped. Does nothing when none is pending.
  void flush() {
    if (micro_ == 0) return;
    ++step_;
    auto task = [&](int r) { update_owned_slice(r); };
    group_->run(task);
    micro_ = 0;
    samples_in_group_ = 0;
  }

  // Continues a run restored from a checkpoint taken at a step boundary: `steps` optimizer
  // steps taken (Adam's bias correction) and `micro_batches` trained (the dropout counter).
  void resume(std::int64_t steps, std::int64_t micro_batches) {
    step_ = steps;
    micro_batches_seen_ = micro_batches;
    micro_ = 0;
    samples_in_group_ = 0;
  }

  [[nodiscard]] std::int64_t optimizer_steps() const { return step_; }
  [[nodiscard]] std::int64_t micro_batches() const { return micro_batches_seen_; }
  // True when no accumulation group is half done (what a checkpoint can capture).
  [[nodiscard]] bool at_step_boundary() const { return micro_ == 0; }
  [[nodiscard]] Opt const& optimizer() const { return optimizer_; }
  [[nodiscard]] typename Opt::State& optimizer_state() { return state_; }
  [[nodiscard]] typename Opt::State const& optimizer_state() const { return state_; }

 private:
  void update_owned_slice(int r) {
    comm::Slice const mine = comm::owned_slice(Model::arena_size, num_replicas, r);
    float const scale = 1.0f / float(samples_in_group_);
    float* params = model_->parameters().data();
    float* reduced = scratch_[std::size_t(r)].data();
    for (std::size_t begin = mine.begin; begin < mine.end; begin += chunk_floats) {
      std::size_t const count = std::min(chunk_floats, mine.end - begin);
      comm::reduce_range(gradients_.data(), num_replicas, begin, begin + count, comm::ReduceOp::sum, scale, reduced);
      optimizer_.update(std::span<float>(params + begin, count), std::span<float const>(reduced, count), state_, begin,
                        step_);
    }
  }

  comm::ThreadGroup* group_;
  Model* model_;
  Opt optimizer_;
  LossFn loss_;
  typename Opt::State state_;
  std::uint64_t seed_;
  int max_batch_ = 0;

  std::vector<typename Model::template Workspace<backend>> workspaces_;
  std::array<AlignedBuffer, num_replicas> replica_gradients_;  // [0] unused: replica 0 uses the model's
  std::array<float*, num_replicas> gradients_{};
  std::array<AlignedBuffer, num_replicas> scratch_;
  std::array<Tally, num_replicas> tallies_{};

  int micro_ = 0;                       // micro-batches accumulated in the current group
  std::int64_t samples_in_group_ = 0;   // samples whose gradients the current group holds
  std::int64_t step_ = 0;               // optimizer steps taken (1-based inside update)
  std::int64_t micro_batches_seen_ = 0;
};

}  // namespace strata::train
