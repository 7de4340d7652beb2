#pragma once
// StepRunner: the training step generated for one (policies, model, optimizer, loss).
//
// Per global batch, every replica runs forward and backward on its shard into its own
// gradient arena (the first replica uses the model's). After K micro-batches (GradAccum<K>),
// each replica reduces its owned slice of the arena across all replicas — summing in
// replica order, scaled by 1/samples — in cache-sized chunks, and applies the optimizer to
// that slice of the single shared copy of the weights while the chunk is still in cache.
//
// What needs the whole gradient before any weight moves takes one more barrier: a loss
// scale (a step with a non-finite gradient is skipped everywhere), clipping by the global
// norm, and layer-wise optimizers (Lamb's trust ratio per tensor). Then each replica
// reduces its slice into a shared buffer with its share of the squared norm, and after the
// barrier every replica adds the shares in replica order, so all take the same decision.
//
// Mixed precision: forward and backward read a copy of the weights rounded to the compute
// type, refreshed slice by slice right after each update; the master weights, gradients and
// optimizer state stay in float.
//
// No allocation, lock or type-erased call happens inside a step.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_group.hpp"
#include "strata/core/aligned_buffer.hpp"
#include "strata/core/dtype.hpp"
#include "strata/core/random.hpp"
#include "strata/data/batch.hpp"
#include "strata/nn/loss.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/train/loss_scale.hpp"
#include "strata/train/replica_pass.hpp"
#include "strata/train/step_progress.hpp"

namespace strata::train {

template <class Config, class Model, optim::Optimizer Opt, nn::Loss LossFn>
class StepRunner : public StepProgress<Config> {
 public:
  using backend = typename strategy::BasicStrategy<Config>::backend;
  using compute_type = typename Config::precision::compute_type;
  static constexpr int num_replicas = Config::num_replicas;
  static constexpr bool mixed = !std::is_same_v<compute_type, float>;
  static constexpr bool layerwise = optim::LayerwiseOptimizer<Opt>;
  static constexpr std::size_t chunk_floats = 2048;  // 8 KiB: reduced and updated while in L1

  // `global_batch_size` bounds the batches this runner takes (shards are sized for it).
  StepRunner(strategy::BasicStrategy<Config>& strategy, Model& model, Opt const& optimizer, LossFn const& loss,
             int global_batch_size, std::uint64_t seed, StepOptions options = {})
      : StepProgress<Config>(global_batch_size, seed, options), group_(&strategy.group()), model_(&model),
        optimizer_(optimizer), loss_(loss), state_(optimizer.make_state(Model::arena_size)) {
    optimizer_.validate();
    strategy::check_global_batch(global_batch_size, num_replicas);
    int const shard = strategy::max_shard_size(global_batch_size, num_replicas);
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
    plan_pieces();
    whole_gradient_first_ = this->needs_global_norm() || layerwise;
    if (whole_gradient_first_) reduced_ = AlignedBuffer(Model::arena_size);
    if constexpr (mixed) {
      compute_weights_ = AlignedBuffer(Model::arena_size);
      refresh_compute_weights(0, Model::arena_size);
    }
  }

  // One global batch (one micro-batch under GradAccum<K>). Returns the summed loss and
  // correct counts over its samples. The optimizer runs after every K-th batch. `next` (the
  // next call's batch) is what a device runner copies ahead; the CPU reads batches in place.
  Tally train_on_batch(data::Batch const& batch, data::Batch const* /*next*/ = nullptr) {
    auto const micro = this->begin_micro_batch(batch.size);
    strategy::DistributedBatch const distributed(batch, num_replicas);
    auto task = [&](int r) {
      strategy::Shard const shard = distributed.shard(r);
      auto& ws = workspaces_[std::size_t(r)];
      float const* params = forward_weights();
      tallies_[std::size_t(r)] = forward_shard<backend>(*model_, ws, params, loss_, shard,
                                                        {true, micro.dropout_seed, shard.first_sample}, micro.loss_scale);
      model_->template backward<backend>(ws, params, gradients_[std::size_t(r)], shard.features, micro.accumulate);
      if (micro.apply) {
        group_->barrier(r);  // every replica's gradients are complete
        update_owned_slice(r);
      }
    };
    group_->run(task);
    this->end_micro_batch(micro.apply);
    Tally total;
    for (auto const& t : tallies_) total += t;
    return total;
  }

  // Applies the optimizer to a partial accumulation group (fewer than K micro-batches, at the
  // end of an epoch), so no sample's gradient is dropped. Does nothing when none is pending.
  void flush() {
    if (!this->group_pending()) return;
    auto task = [&](int r) { update_owned_slice(r); };
    group_->run(task);
    this->finish_step();
  }

  // Continues a run restored from a checkpoint taken at a step boundary: `steps` optimizer
  // steps taken (Adam's bias correction), `micro_batches` trained (the dropout counter) and
  // the loss scale, when the checkpoint has one. Also re-reads the (restored) weights.
  void resume(std::int64_t steps, std::int64_t micro_batches, std::optional<LossScaleState> loss_scale = {}) {
    this->restart(steps, micro_batches, loss_scale);
    if constexpr (mixed) refresh_compute_weights(0, Model::arena_size);
  }

  // Gradient floats reduced across replicas so far, all replicas together (each parameter
  // once per optimizer step): the communication volume, counted where it happens.
  [[nodiscard]] std::int64_t floats_reduced() const {
    std::int64_t total = 0;
    for (auto const& t : replica_tallies_) total += t.floats_reduced;
    return total;
  }
  [[nodiscard]] Opt const& optimizer() const { return optimizer_; }
  [[nodiscard]] typename Opt::State& optimizer_state() { return state_; }
  [[nodiscard]] typename Opt::State const& optimizer_state() const { return state_; }

 private:
  // The part of one parameter tensor inside one replica's owned slice.
  struct Piece {
    std::size_t begin = 0, end = 0;
    std::size_t tensor = 0;
    bool decay = true;
  };
  // One replica's share of the squared gradient norm, and the floats it has reduced, on its own cache line.
  struct alignas(64) ReplicaTally {
    double sum_of_squares = 0.0;
    std::int64_t floats_reduced = 0;
  };

  void plan_pieces() {
    auto const tensors = Model::parameter_tensors();
    tensor_count_ = tensors.size();
    for (int r = 0; r < num_replicas; ++r) {
      comm::Slice const mine = comm::owned_slice(Model::arena_size, num_replicas, r);
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        std::size_t const begin = std::max(tensors[t].offset, mine.begin);
        std::size_t const end = std::min(tensors[t].offset + nn::element_count(tensors[t].shape), mine.end);
        bool decay = true;
        if constexpr (requires { optimizer_.decays(tensors[t].name); }) decay = optimizer_.decays(tensors[t].name);
        if (begin < end) pieces_[std::size_t(r)].push_back({begin, end, t, decay});
      }
      if constexpr (layerwise) tensor_shares_[std::size_t(r)].resize(tensor_count_);
    }
  }

  [[nodiscard]] float const* forward_weights() const {
    if constexpr (mixed) return compute_weights_.data();
    else return model_->parameters().data();
  }

  void refresh_compute_weights(std::size_t begin, std::size_t end) {
    std::copy(model_->parameters().data() + begin, model_->parameters().data() + end, compute_weights_.data() + begin);
    round_to<compute_type>(compute_weights_.data() + begin, end - begin);
  }

  // Calls f(begin, count, piece) for each chunk of replica r's pieces.
  template <class F>
  void for_each_chunk(int r, F&& f) {
    for (Piece const& piece : pieces_[std::size_t(r)])
      for (std::size_t begin = piece.begin; begin < piece.end; begin += chunk_floats)
        f(begin, std::min(chunk_floats, piece.end - begin), piece);
  }

  void update_owned_slice(int r) {
    // The mean over the group's samples, and the loss scale taken back out.
    float const scale = this->gradient_scale();
    optim::StepInfo const step{this->step_ + 1};
    float* params = model_->parameters().data();
    for (Piece const& piece : pieces_[std::size_t(r)])
      replica_tallies_[std::size_t(r)].floats_reduced += std::int64_t(piece.end - piece.begin);
    auto info = [&](Piece const& piece) { return optim::StepInfo{step.t, step.lr_scale, piece.decay}; };
    auto weights = [&](std::size_t begin, std::size_t count) { return std::span<float>(params + begin, count); };
    if (!whole_gradient_first_) {  // fused: reduce a chunk, update it while it is in cache
      float* reduced = scratch_[std::size_t(r)].data();
      for_each_chunk(r, [&](std::size_t begin, std::size_t count, Piece const& piece) {
        comm::reduce_range(gradients_.data(), num_replicas, begin, begin + count, comm::ReduceOp::sum, scale, reduced);
        optimizer_.update(weights(begin, count), std::span<float const>(reduced, count), state_, begin, info(piece));
      });
    } else {
      double squares = 0.0;
      for_each_chunk(r, [&](std::size_t begin, std::size_t count, Piece const&) {
        float* out = reduced_.data() + begin;
        comm::reduce_range(gradients_.data(), num_replicas, begin, begin + count, comm::ReduceOp::sum, scale, out);
        squares += sum_of_squares(out, count);
      });
      replica_tallies_[std::size_t(r)].sum_of_squares = squares;
      group_->barrier(r);
      double total = 0.0;
      for (auto const& share : replica_tallies_) total += share.sum_of_squares;  // replica order: one answer everywhere
      auto const decision = this->decide(total, r);
      if (!decision.apply) return;  // skipped on every replica alike
      float const factor = decision.factor;
      auto gradient = [&](std::size_t begin, std::size_t count) {
        float* g = reduced_.data() + begin;
        if (factor != 1.0f)
          for (std::size_t i = 0; i < count; ++i) g[i] *= factor;
        return std::span<float const>(g, count);
      };
      if constexpr (layerwise) {
        auto& shares = tensor_shares_[std::size_t(r)];
        std::fill(shares.begin(), shares.end(), optim::NormShares{});
        for_each_chunk(r, [&](std::size_t begin, std::size_t count, Piece const& piece) {
          shares[piece.tensor] += optimizer_.moments(weights(begin, count), gradient(begin, count), state_, begin, info(piece));
        });
        group_->barrier(r);
        for (Piece const& piece : pieces_[std::size_t(r)]) {
          optim::NormShares tensor;
          for (auto const& replica : tensor_shares_) tensor += replica[piece.tensor];
          optimizer_.apply(weights(piece.begin, piece.end - piece.begin), state_, piece.begin, info(piece),
                           Opt::trust_ratio(tensor));
        }
      } else {
        for_each_chunk(r, [&](std::size_t begin, std::size_t count, Piece const& piece) {
          optimizer_.update(weights(begin, count), gradient(begin, count), state_, begin, info(piece));
        });
      }
    }
    if constexpr (mixed) {
      comm::Slice const mine = comm::owned_slice(Model::arena_size, num_replicas, r);
      refresh_compute_weights(mine.begin, mine.end);
    }
  }

  // Four partial sums in a fixed order: the same result every run, and vectorizable.
  static double sum_of_squares(float const* x, std::size_t n) {
    double part[4] = {0.0, 0.0, 0.0, 0.0};
    std::size_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (std::size_t k = 0; k < 4; ++k) part[k] += double(x[i + k]) * double(x[i + k]);
    for (; i < n; ++i) part[0] += double(x[i]) * double(x[i]);
    return (part[0] + part[1]) + (part[2] + part[3]);
  }

  comm::ThreadGroup* group_;
  Model* model_;
  Opt optimizer_;
  LossFn loss_;
  typename Opt::State state_;

  std::vector<typename Model::template Workspace<backend, compute_type>> workspaces_;
  std::array<AlignedBuffer, num_replicas> replica_gradients_;  // [0] unused: replica 0 uses the model's
  std::array<float*, num_replicas> gradients_{};
  std::array<AlignedBuffer, num_replicas> scratch_;
  std::array<Tally, num_replicas> tallies_{};
  std::array<std::vector<Piece>, num_replicas> pieces_;
  std::size_t tensor_count_ = 0;

  bool whole_gradient_first_ = false;
  AlignedBuffer reduced_;                                  // the reduced gradient, when reduced before updating
  std::array<ReplicaTally, num_replicas> replica_tallies_{};
  std::array<std::vector<optim::NormShares>, num_replicas> tensor_shares_;  // Lamb: per tensor, per replica
  AlignedBuffer compute_weights_;                          // mixed precision: the weights rounded to compute_type
};

}  // namespace strata::train
