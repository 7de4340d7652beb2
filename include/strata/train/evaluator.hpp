#pragma once
// Evaluator: distributed inference over a dataset — the mean loss and accuracy (evaluate)
// or the model's outputs (predict) — with each replica's ReplicaPass on its shard of every
// batch, on any device (a device copies the next shard while this one computes). Under
// mixed precision it computes as training does: on the weights rounded to the compute type,
// with 16-bit activations. A profiled evaluator (Probe: profile/probe.hpp) times each batch's
// wait for its data, the batch, and every replica's forward pass, as fit's step does.

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/comm/thread_group.hpp"
#include "strata/core/aligned_buffer.hpp"
#include "strata/core/dtype.hpp"
#include "strata/core/tensor.hpp"
#include "strata/data/batch.hpp"
#include "strata/nn/loss.hpp"
#include "strata/profile/memory.hpp"
#include "strata/profile/probe.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/replica_pass.hpp"

namespace strata::train {

// The mean loss (and accuracy, for classification losses) of a tally.
template <class LossFn>
Evaluation summarize(Tally const& total) {
  Evaluation result;
  result.samples = total.samples;
  result.loss = total.loss_sum / double(total.samples);
  if constexpr (LossFn::reports_accuracy) result.accuracy = double(total.correct) / double(total.samples);
  return result;
}

// A tally summed over the job's processes (strategy/processes.hpp): the same on each.
template <class Processes>
Tally job_total(Processes& processes, Tally const& mine) {
  if (processes.processes() == 1) return mine;
  double sums[3] = {mine.loss_sum, double(mine.correct), double(mine.samples)};
  processes.sum(std::span<double>(sums));
  Tally total;
  total.loss_sum = sums[0];
  total.correct = std::int64_t(sums[1]);
  total.samples = std::int64_t(sums[2]);
  return total;
}

// Calls fn(shard, next, replica) on every replica, in the group's threads, for every batch
// of `data` in order: local replica r takes shard first + r of the `world` shards of each
// batch (first = 0 and world = the local replicas in one process). `next` is the replica's
// shard of the following batch (nullptr after the last), which a device evaluator copies
// while it computes this one. *batch_start, when given, is the index of the current
// batch's first sample. `probe` times each batch (step k: batch k) and the wait for its data.
template <class Probe, class Fn>
void for_each_shard(comm::ThreadGroup& group, data::Dataset const& data, int batch_size, int world, int first,
                    Probe& probe, Fn&& fn, std::int64_t* batch_start = nullptr) {
  auto stream = data.batch(batch_size).stream(0, 0, 2);
  std::int64_t index = 0;
  auto fetch_begin = probe.now();
  for (data::Batch const *batch = stream->next(), *next = nullptr; batch; batch = next) {
    probe.set_step(index++);
    next = stream->next();
    auto const batch_begin = probe.now();
    probe.record(-1, profile::Phase::data_wait, fetch_begin, batch_begin);
    strategy::DistributedBatch const distributed(*batch, world);
    auto task = [&](int r) {
      if (!next) return fn(distributed.shard(first + r), nullptr, r);
      strategy::Shard const following = strategy::DistributedBatch(*next, world).shard(first + r);
      fn(distributed.shard(first + r), &following, r);
    };
    group.run(task);
    fetch_begin = probe.now();
    probe.record(-1, profile::Phase::step, batch_begin, fetch_begin);
    if (batch_start) *batch_start += batch->size;
  }
}

// What an Evaluator's replicas run on: each one's ReplicaPass and the weights its forward
// pass reads. OwnReplicas holds both (evaluate, predict). A fit's validation borrows the
// StepRunner's instead (RunnerReplicas): its passes' workspaces, sized for the same batch, sit
// unused between epochs, and its update keeps the weights its forward reads (rounded, under
// mixed precision) current, so a validation allocates nothing, and refreshes nothing.
template <class Config, class Model>
class OwnReplicas {
 public:
  using device = typename Config::device;
  using compute_type = typename Config::precision::compute_type;
  using Pass = ReplicaPass<Model, device, compute_type>;

  OwnReplicas(Model const& model, int shard)
      : weights_(model.parameters(), Config::num_replicas, Model::parameter_tensors()) {
    passes_.reserve(Config::num_replicas);
    for (int r = 0; r < Config::num_replicas; ++r) passes_.emplace_back(shard, weights_.device_of(r));
  }
  // Before each evaluation: the host weights may have changed since the last.
  void refresh() { weights_.refresh(0, Model::arena_size); }
  [[nodiscard]] Pass& pass(int r) { return passes_[std::size_t(r)]; }
  [[nodiscard]] float const* weights(int r) const { return weights_(r); }
  [[nodiscard]] Bf16CopyBinding bind_copy(int r) const { return bind_products_copy(weights_, r); }

  // The weights of `model` it reads (and their rounded copy under mixed precision), and its workspaces.
  void add_memory(Model const& model, profile::Memory& m) {
    std::int64_t const bytes = std::int64_t(model.parameters().size() * sizeof(float));
    m.arena += std::is_same_v<compute_type, float> ? bytes : 2 * bytes;
    profile::add_pass_memory(passes_, m);
  }

 private:
  ReplicaWeights<device, compute_type> weights_;
  std::vector<Pass> passes_;
};

template <class Runner>
class RunnerReplicas {
 public:
  using Pass = typename Runner::Pass;

  explicit RunnerReplicas(Runner& runner) : runner_(&runner) {}
  void refresh() {}  // the runner's update refreshed them
  [[nodiscard]] Pass& pass(int r) { return runner_->replica_pass(r); }
  [[nodiscard]] float const* weights(int r) const { return runner_->forward_weights(r); }
  [[nodiscard]] Bf16CopyBinding bind_copy(int r) const { return runner_->bind_weights_copy(r); }
  template <class Model>
  void add_memory(Model const&, profile::Memory&) {}  // the runner's (StepRunner::memory)

 private:
  Runner* runner_;
};

template <class Config, class Model, class Probe = profile::NoProbe, class Replicas = OwnReplicas<Config, Model>>
class Evaluator {
 public:
  using Pass = typename Replicas::Pass;
  static constexpr int num_replicas = Config::num_replicas;

  // Across processes (MultiWorkerMirrored), each process's replicas take their shards of
  // every batch and the figures are summed over the processes: every sample is counted
  // once, and every process gets the same result.
  Evaluator(strategy::BasicStrategy<Config>& strategy, Model const& model, int global_batch_size)
    requires std::is_same_v<Replicas, OwnReplicas<Config, Model>>
      : Evaluator(strategy, model, global_batch_size,
                  Replicas(model, shard_size(strategy, global_batch_size))) {}
  // On `replicas` whose passes take shards of global_batch_size (a StepRunner's of that batch).
  Evaluator(strategy::BasicStrategy<Config>& strategy, Model const& model, int global_batch_size, Replicas replicas)
      : group_(&strategy.group()), processes_(&strategy.processes()), model_(&model), batch_size_(global_batch_size),
        world_(processes_->processes() * num_replicas), first_(processes_->process() * num_replicas),
        replicas_(std::move(replicas)) {
    (void)shard_size(strategy, global_batch_size);
  }

  // Mean loss (and accuracy for classification losses) over every sample of `data`.
  template <nn::Loss LossFn>
  Evaluation evaluate(LossFn const& loss, data::Dataset const& data) {
    std::array<Tally, num_replicas> tallies{};
    replicas_.refresh();
    for_each_batch(data, [&](Pass& pass, int r, strategy::Shard const& shard, bool staged, strategy::Shard const* next) {
      tallies[std::size_t(r)] += pass.evaluate(*model_, replicas_.weights(r), loss, shard, staged, next);
    });
    Tally mine;
    for (auto const& t : tallies) mine += t;
    return summarize<LossFn>(job_total(*processes_, mine));
  }

  // The model's outputs for every sample, output_width x size, in dataset order. Across
  // processes each fills the columns of its shards and the sum (with zeros elsewhere:
  // exact) gives every process all of them.
  Matrix predict(data::Dataset const& data) {
    Matrix out = Matrix::Zero(Model::output_width, Eigen::Index(data.size()));
    std::int64_t batch_start = 0;
    replicas_.refresh();
    for_each_batch(
        data,
        [&](Pass& pass, int r, strategy::Shard const& shard, bool staged, strategy::Shard const* next) {
          float* const columns = out.data() + (batch_start + shard.first_sample) * Model::output_width;
          pass.predict(*model_, replicas_.weights(r), shard, staged, next, columns);
        },
        &batch_start);
    if (processes_->processes() > 1) processes_->sum(std::span<float>(out.data(), std::size_t(out.size())));
    return out;
  }

  [[nodiscard]] Probe& probe() { return probe_; }

  // What it holds (OwnReplicas: the weights it reads, and its replicas' workspaces).
  [[nodiscard]] profile::Memory memory() {
    profile::Memory m;
    replicas_.add_memory(*model_, m);
    return m;
  }

 private:
  // Each replica's shard of a global batch; checks that the batch splits over the job's replicas.
  static int shard_size(strategy::BasicStrategy<Config>& strategy, int global_batch_size) {
    int const world = strategy.processes().processes() * num_replicas;
    strategy::check_global_batch(global_batch_size, world);
    return strategy::max_shard_size(global_batch_size, world);
  }

  // Calls fn(pass, replica, shard, staged, next) on every replica for every batch of `data`,
  // in order: `staged` says the replica's pass copied this shard ahead during the previous
  // batch, `next` is its shard of the following batch (nullptr after the last).
  template <class Fn>
  void for_each_batch(data::Dataset const& data, Fn&& fn, std::int64_t* batch_start = nullptr) {
    Model::check_input_width(data.feature_width());
    std::array<bool, num_replicas> staged{};
    for_each_shard(
        *group_, data, batch_size_, world_, first_, probe_,
        [&](strategy::Shard const& shard, strategy::Shard const* next, int r) {
          auto const begin = probe_.now();
          Pass& pass = replicas_.pass(r);
          [[maybe_unused]] auto const bound = pass.bind();
          [[maybe_unused]] auto const copy = replicas_.bind_copy(r);
          fn(pass, r, shard, staged[std::size_t(r)], next);
          staged[std::size_t(r)] = Pass::copies_ahead && next != nullptr;
          probe_.record(r, profile::Phase::forward, begin, probe_.now());
        },
        batch_start);
  }

  comm::ThreadGroup* group_;
  typename strategy::BasicStrategy<Config>::processes_type* processes_;
  Model const* model_;
  int batch_size_;
  int world_, first_;  // shards of each batch in the job; this process's first
  Replicas replicas_;  // the passes and the weights they read
  [[no_unique_address]] Probe probe_{};
};

}  // namespace strata::train
