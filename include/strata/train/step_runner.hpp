#pragma once
// StepRunner: the training step generated for one (policies, model, optimizer, loss),
// assembled from three parts chosen by specialisation on the policy tags:
//
//   ReplicaPass<Model, Backend, T>   forward, loss and backward of one replica on its shard
//                                    (train/replica_pass.hpp)
//   GradientSync<Strategy, Device>   how the gradients and the update's global quantities
//                                    cross replicas (train/gradient_sync.hpp)
//   SliceUpdate<Optimizer, ...>      each replica updates the slice of the weights it owns
//                                    (train/slice_update.hpp)
//
// Per global batch, every replica runs its pass into its own gradient arena (on the CPU the
// first replica uses the model's). After K micro-batches (GradAccum<K>) the sync makes the
// summed gradient readable, and each replica reduces and updates its owned slice of the
// weights, scaled by 1/samples. The same runner serves every device: the parts are chosen
// by the device tag (strata/cuda.hpp brings the Cuda ones: device memory, NCCL, kernels).
//
// Mixed precision on the CPU: forward and backward read a copy of the weights rounded to
// the compute type, refreshed chunk by chunk as each is updated (and in bf16 too where the
// CPU multiplies bf16, bound on each replica's thread for its products); the master
// weights, gradients and optimizer state stay in float. (On Cuda the GEMMs round their
// operands.)
//
// No allocation, lock or type-erased call happens inside a step.
//
// `Probe` times the step's phases for profiling (profile/probe.hpp). The default, NoProbe,
// reads no clock and stores nothing: a run without profiling is the same code as before.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/comm/thread_group.hpp"
#include "strata/core/aligned_buffer.hpp"
#include "strata/core/dtype.hpp"
#include "strata/data/batch.hpp"
#include "strata/nn/loss.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/profile/memory.hpp"
#include "strata/profile/probe.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/strategy/worker_input.hpp"
#include "strata/train/gradient_sync.hpp"
#include "strata/train/loss_scale.hpp"
#include "strata/train/replica_pass.hpp"
#include "strata/train/slice_update.hpp"
#include "strata/train/step_progress.hpp"

namespace strata::train {

// The SliceUpdate of the device, unless the sync names its own (`Sync::update_type<Opt, T>`:
// CentralStorage on Cuda updates on the host what the GPUs compute with).
template <class Sync, class Opt, class Device, int Replicas, class T>
struct UpdateFor {
  using type = SliceUpdate<Opt, Device, Replicas, T>;
};
template <class Sync, class Opt, class Device, int Replicas, class T>
  requires requires { typename Sync::template update_type<Opt, T>; }
struct UpdateFor<Sync, Opt, Device, Replicas, T> {
  using type = typename Sync::template update_type<Opt, T>;
};
template <class Sync, class Opt, class Device, int Replicas, class T>
using update_for_t = typename UpdateFor<Sync, Opt, Device, Replicas, T>::type;

// `Sync` defaults to the strategy's sync on the device; a test or a strategy in the making
// may name another (CommunicatorSync over threads is checked against ThreadSync so).
template <class Config, class Model, optim::Optimizer Opt, nn::Loss LossFn, class Sync = gradient_sync_t<Config>,
          class Probe = profile::NoProbe>
class StepRunner : public StepProgress<Config> {
 public:
  using device = typename Config::device;
  using backend = typename strategy::BasicStrategy<Config>::backend;
  using compute_type = typename Config::precision::compute_type;
  using sync_type = Sync;
  using Pass = ReplicaPass<Model, device, compute_type>;
  using Update = update_for_t<Sync, Opt, device, Config::num_replicas, compute_type>;
  static constexpr int num_replicas = Config::num_replicas;  // in this process

  // `global_batch_size` bounds the batches this runner takes (shards are sized for it).
  // `sync_arguments` follow the sync's own (thread group, gradients, layer offsets).
  template <class... SyncArguments>
  StepRunner(strategy::BasicStrategy<Config>& strategy, Model& model, Opt const& optimizer, LossFn const& loss,
             int global_batch_size, std::uint64_t seed, StepOptions options = {}, SyncArguments&&... sync_arguments)
      : StepProgress<Config>(global_batch_size, seed, options), group_(&strategy.group()), model_(&model), loss_(loss),
        sync_(strategy.group(), model.gradients(), std::span<std::size_t const>(Model::offsets),
              std::forward<SyncArguments>(sync_arguments)...),
        update_(optimizer, Model::parameter_tensors(), model.parameters(), sync_, this->needs_global_norm()) {
    int const world = sync_.num_replicas_in_sync();
    strategy::check_global_batch(global_batch_size, world);
    int const shard = strategy::max_shard_size(global_batch_size, world);
    passes_.reserve(num_replicas);
    for (int r = 0; r < num_replicas; ++r) passes_.emplace_back(shard, sync_.device_of(r));
    if constexpr (Probe::enabled && requires { sync_.time_buckets(true); }) sync_.time_buckets(true);
  }

  // One global batch (one micro-batch under GradAccum<K>). Returns the summed loss and
  // correct counts over its samples. The optimizer runs after every K-th batch. `next`,
  // where given, is the batch of the next call (unchanged until then): a device copies its
  // shards while this batch computes, and the next call starts at once. The Trainer passes it.
  //
  // With a WorkerPart (per-worker input, strategy/worker_input.hpp), `batch` is this
  // process's local part of the step's global batch, split over its own replicas; otherwise
  // every process reads the global batch and its replicas take their shards of it.
  Tally train_on_batch(data::Batch const& batch, data::Batch const* next = nullptr, strategy::WorkerPart part = {}) {
    bool const local = part.global_size > 0;
    auto const micro = this->begin_micro_batch(local ? part.global_size : batch.size);
    int const world = sync_.num_replicas_in_sync(), first = sync_.first_replica();
    auto split = [&](data::Batch const& b, strategy::WorkerPart p) {
      return local ? strategy::DistributedBatch(b, world, num_replicas, first, p) : strategy::DistributedBatch(b, world);
    };
    strategy::DistributedBatch const distributed = split(batch, part);
    std::optional<strategy::DistributedBatch> following;  // only its shards' data is read
    if constexpr (Pass::copies_ahead)
      if (next) following.emplace(split(*next, {}));
    bool const staged = staged_ == key_of(&batch);
    staged_ = key_of(next);
    sync_.begin_reduction(micro.apply);
    auto task = [&](int r) {
      Pass& pass = passes_[std::size_t(r)];
      [[maybe_unused]] auto const bound = pass.bind();
      [[maybe_unused]] auto const copy = bind_products_copy(update_, r);
      strategy::Shard const shard = distributed.shard(first + r);
      std::optional<strategy::Shard> ahead;
      if constexpr (Pass::copies_ahead)
        if (following) ahead = following->shard(first + r);
      auto const begin = probe_.now();
      typename Probe::Stamp forward_end{};
      tallies_[std::size_t(r)] = pass.train(
          *model_, update_.forward_weights(r), loss_, shard, staged, ahead ? &*ahead : nullptr,
          {true, micro.dropout_seed, shard.first_sample}, micro.loss_scale, sync_.gradients(r), micro.accumulate,
          [&](std::size_t layer) { sync_.layer_done(r, layer); }, [&] { forward_end = probe_.now(); });
      probe_.record(r, profile::Phase::forward, begin, forward_end);
      probe_.record(r, profile::Phase::backward, forward_end, probe_.now());
      if (micro.apply) update_owned_slice(r);
    };
    try {
      group_->run(task);
    } catch (...) {
      staged_ = {};  // a failed step leaves nothing staged
      throw;
    }
    this->end_micro_batch(micro.apply);
    Tally total;
    for (auto const& t : tallies_) total += t;
    return total;
  }

  // Applies the optimizer to a partial accumulation group (fewer than K micro-batches, at the
  // end of an epoch), so no sample's gradient is dropped. Does nothing when none is pending.
  void flush() {
    if (!this->group_pending()) return;
    sync_.begin_reduction(true);
    auto task = [&](int r) {
      [[maybe_unused]] auto const bound = passes_[std::size_t(r)].bind();
      update_owned_slice(r);
    };
    group_->run(task);
    this->finish_step();
  }

  // Continues a run restored from a checkpoint taken at a step boundary: `steps` optimizer
  // steps taken (Adam's bias correction), `micro_batches` trained (the dropout counter) and
  // the loss scale, when the checkpoint has one. Also re-reads the (restored) host weights
  // and optimizer state.
  // Across processes, every worker continues from the chief's weights and state.
  void resume(std::int64_t steps, std::int64_t micro_batches, std::optional<LossScaleState> loss_scale = {}) {
    this->restart(steps, micro_batches, loss_scale);
    sync_.share_from_chief(model_->parameters(), update_.state());
    update_.resume();
  }

  // Brings the model's weights and the host optimizer state up to date, where a device
  // keeps its own copies (what checkpoints and callbacks read).
  void sync_to_host() { update_.sync_to_host(); }

  // Replicas of the whole job: this process's times the processes (known at run time).
  [[nodiscard]] int num_replicas_in_sync() const { return sync_.num_replicas_in_sync(); }
  // Gradient floats reduced across replicas so far, all replicas together (each parameter
  // once per optimizer step): the communication volume, counted where it happens.
  [[nodiscard]] std::int64_t floats_reduced() const {
    std::int64_t total = 0;
    for (auto const& t : floats_reduced_) total += t.value;
    return total;
  }
  [[nodiscard]] Opt const& optimizer() const { return update_.optimizer(); }
  [[nodiscard]] typename Opt::State& optimizer_state() { return update_.state(); }
  [[nodiscard]] typename Opt::State const& optimizer_state() const { return update_.state(); }
  [[nodiscard]] Sync& gradient_sync() { return sync_; }
  [[nodiscard]] Pass& replica_pass(int r) { return passes_[std::size_t(r)]; }
  // The weights replica r's forward pass reads, as the last update left them, and (bound on
  // the calling thread) their bf16 copy for the products, where there is one. A fit's
  // validation reads them between epochs (train/evaluator.hpp, RunnerReplicas).
  [[nodiscard]] float const* forward_weights(int r) const { return update_.forward_weights(r); }
  [[nodiscard]] Bf16CopyBinding bind_weights_copy(int r) const { return bind_products_copy(update_, r); }
  [[nodiscard]] Probe& probe() { return probe_; }

  // What this process holds for the run (profile/memory.hpp); the process figures are left
  // to profile::read_process_memory.
  [[nodiscard]] profile::Memory memory() {
    profile::Memory m;
    std::int64_t const floats = std::int64_t(model_->parameters().size());
    m.arena = floats * std::int64_t(sizeof(float)) * (1 + num_replicas);  // weights, one gradient arena per replica
    update_.state().for_each_slot([&](char const*, AlignedBuffer& slot) {
      m.arena += std::int64_t(slot.size() * sizeof(float));
    });
    if constexpr (!std::is_same_v<compute_type, float>) m.arena += floats * std::int64_t(sizeof(float));  // rounded copy
    profile::add_pass_memory(passes_, m);
    return m;
  }

  // The GEMM precision of every replica, where the device has a choice (Cuda: TF32 for a
  // FullPrecision run, cuda::GemmPrecision::tf32).
  template <class Precision>
    requires requires(Pass& pass, Precision p) { pass.set_gemm_precision(p); }
  void set_gemm_precision(Precision p) {
    for (Pass& pass : passes_) pass.set_gemm_precision(p);
  }

 private:
  void update_owned_slice(int r) {
    auto const begin = probe_.now();
    sync_.gradients_ready(r);
    auto const ready = probe_.now();
    floats_reduced_[std::size_t(r)].value +=
        update_.run(r, sync_, this->gradient_scale(), this->step_ + 1,
                    [&](double squared_norm) { return this->decide(squared_norm, r); });
    if constexpr (Probe::enabled && requires { sync_.waited_ns(r); }) {
      // The update waited for other replicas' layers between its chunks: shown at its start.
      auto const waited = ready + sync_.waited_ns(r);
      probe_.record(r, profile::Phase::gradient_wait, begin, waited);
      probe_.record(r, profile::Phase::update, waited, std::max(waited, probe_.now()));
    } else {
      probe_.record(r, profile::Phase::gradient_wait, begin, ready);
      probe_.record(r, profile::Phase::update, ready, probe_.now());
    }
    if constexpr (Probe::enabled && requires { sync_.bucket_timings(r); }) record_buckets(r);
  }

  // Each bucket's collective of replica r's last reduction, on its communication track, with
  // the bytes it moved (halved under Compress<T>).
  void record_buckets(int r) {
    auto const timings = sync_.bucket_timings(r);
    auto const buckets = sync_.bucket_plan().buckets();
    for (std::size_t b = 0; b < timings.size(); ++b)
      probe_.record(r, profile::Phase::all_reduce, probe_.at(timings[b].begin), probe_.at(timings[b].end), int(b),
                    std::int64_t(buckets[b].size() * sizeof(typename Sync::wire_type)));
  }

  // What identifies the batch whose shards are staged: where its data is, its size and index.
  struct BatchKey {
    float const* features = nullptr;
    float const* targets = nullptr;
    int size = 0;
    std::int64_t index = -1;
    bool operator==(BatchKey const&) const = default;
  };
  static BatchKey key_of(data::Batch const* b) {
    return b ? BatchKey{b->features.data, b->targets.data, b->size, b->index} : BatchKey{};
  }

  comm::ThreadGroup* group_;
  Model* model_;
  LossFn loss_;
  Sync sync_;
  Update update_;
  std::vector<Pass> passes_;
  std::array<Tally, num_replicas> tallies_{};
  std::array<OnCacheLine<std::int64_t>, num_replicas> floats_reduced_{};
  BatchKey staged_{};  // the batch whose shards the replicas staged for the next call
  [[no_unique_address]] Probe probe_{};
};

}  // namespace strata::train
