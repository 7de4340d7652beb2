#pragma once
// GradientSync: how a step's gradients, and the global quantities of its update (the
// squared norm for clipping and the loss scale, Lamb's per-tensor norms), cross replicas.
// It is one of the three parts a step is built from (train/step_runner.hpp):
//
//   ReplicaPass   forward, loss, backward of one replica into `gradients(r)`
//   GradientSync  makes the summed gradient of every replica readable by its owner
//   SliceUpdate   each replica updates the slice of the weights it owns
//
// A sync offers, for local replica r (a thread of this process):
//   gradients(r)            the arena backward writes (replica 0's is the model's own)
//   layer_done(r, layer)    backward finished `layer`'s gradients: a bucket may start
//   gradients_ready(r)      after backward of the group's last micro-batch: returns when
//                           summands() hold every replica's contribution (ThreadSync: at
//                           once; the update then waits per layer with wait_final)
//   summands(r)             the host arenas whose sum, in order, is every replica's gradient
//                           (SliceUpdate reads s * their sum, in its update or into a buffer)
//   sum(r, share)           the sum of one double per local replica, in replica order, the
//                           same on every replica (a barrier); every process sees the same
//                           reduced gradient, so local shares make a global decision
//   barrier(r)              every local replica is here
//   first_replica()         the job-wide index of local replica 0 (its shard of a batch)
//   share_from_chief(w, s)  the chief's weights and optimizer state, on every process
//   slice(r)                the part of the arena replica r updates
//   device_of(r)            the device (GPU) replica r computes on
//   num_replicas_in_sync()  replicas of the whole job: local ones × processes (run time)
//
// ThreadSync serves OneDevice, Mirrored<N> and CentralStorage<N> on the CPU: no copy, no
// collective and no barrier; each chunk of the update sums every replica's arena in replica
// order while it is in cache, taken by whichever replica is free once every replica's
// backward has passed its layer (wait_final, claim).
// CommunicatorSync<Comm> serves any Communicator (threads, MPI, the Hierarchical of both):
// the gradients are all-reduced in BucketBytes<B> buckets, each started as soon as backward
// completes it (the overlap of PyTorch DDP and Horovod), on a communication thread; under
// Compress<T> each bucket crosses as T (comm/buckets.hpp).
// DeviceSync<N> (train/gradient_sync_cuda.hpp) serves them on Cuda: the replicas' arenas in
// device memory, summed by a kernel on one GPU or reduce-scattered over NCCL across GPUs.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/comm/buckets.hpp"
#include "strata/comm/communicator.hpp"
#include "strata/comm/reduce_op.hpp"
#include "strata/comm/rendezvous.hpp"
#include "strata/comm/thread_group.hpp"
#include "strata/comm/wait.hpp"
#include "strata/core/aligned_buffer.hpp"
#include "strata/core/error.hpp"
#include "strata/policy/communication.hpp"
#include "strata/policy/device.hpp"
#include "strata/policy/slot.hpp"
#include "strata/policy/strategy.hpp"

namespace strata::train {

// What every sync shares: the replica threads, and the per-replica doubles that sum() adds.
template <int Replicas>
class ReplicaBarrier {
 public:
  static constexpr int local_replicas = Replicas;

  void barrier(int r) { group_->barrier(r); }
  // The job-wide index of local replica 0: a process's replicas take the shards
  // first_replica() + r of every global batch.
  [[nodiscard]] static constexpr int first_replica() { return 0; }
  // Where there are other processes: makes this process's weights and optimizer state the
  // chief's (process 0's). One process: nothing to do.
  template <class State>
  void share_from_chief(std::span<float>, State&) {}
  double sum(int r, double share) {
    shares_[std::size_t(r)].value = share;
    group_->barrier(r);
    double total = 0.0;
    for (auto const& s : shares_) total += s.value;  // replica order: one answer everywhere
    return total;
  }

 protected:
  explicit ReplicaBarrier(comm::ThreadGroup& group) : group_(&group) {
    if (group.size() != local_replicas)
      throw ConfigError(strata::detail::message("GradientSync: the strategy has ", group.size(),
                                                " replica threads but the step was built for ", local_replicas));
  }

  comm::ThreadGroup* group_;

 private:
  std::array<OnCacheLine<double>, local_replicas> shares_{};
};

// The syncs of host memory: one gradient arena per local replica (the first is the model's).
template <int Replicas>
class ReplicaArenas : public ReplicaBarrier<Replicas> {
 public:
  using ReplicaBarrier<Replicas>::local_replicas;

  [[nodiscard]] float* gradients(int r) { return gradients_[std::size_t(r)]; }
  // The slice of the arena replica r updates: equal cache-line-aligned parts.
  [[nodiscard]] comm::Slice slice(int r) const { return comm::owned_slice(arena_, local_replicas, r); }
  // Every replica computes on the one device of the host.
  [[nodiscard]] static constexpr int device_of(int) { return 0; }

 protected:
  ReplicaArenas(comm::ThreadGroup& group, std::span<float> model_gradients)
      : ReplicaBarrier<Replicas>(group), arena_(model_gradients.size()) {
    gradients_[0] = model_gradients.data();
    for (int r = 1; r < local_replicas; ++r) {
      owned_[std::size_t(r)] = AlignedBuffer(arena_);
      gradients_[std::size_t(r)] = owned_[std::size_t(r)].data();
    }
  }

  std::size_t arena_;
  std::array<float*, local_replicas> gradients_{};

 private:
  std::array<AlignedBuffer, local_replicas> owned_;  // [0] unused: replica 0 writes the model's
};

// OneDevice, Mirrored<N> and CentralStorage<N> on the CPU: the update reads every replica's
// arena in place, and there is no barrier. A layer's gradients are final once every replica's
// backward has passed it (layer_done, from the last layer to the first), so the update waits
// only for the layers it reads (wait_final), and a replica whose backward ends first updates
// the layers the others have finished while they compute the rest, instead of waiting for
// them. The update's chunks go to whichever replica is free (claim), the last layer's first.
// Who updates a weight does not change its bits: each is summed in replica order.
template <int Replicas>
class ThreadSync : public ReplicaArenas<Replicas> {
  using base = ReplicaArenas<Replicas>;

 public:
  ThreadSync(comm::ThreadGroup& group, std::span<float> model_gradients, std::span<std::size_t const> layer_offsets)
      : base(group, model_gradients), offsets_(layer_offsets.begin(), layer_offsets.end()) {
    if (offsets_.size() < 2 || offsets_.front() != 0 || offsets_.back() != this->arena_ ||
        !std::is_sorted(offsets_.begin(), offsets_.end()))
      throw ConfigError(strata::detail::message("ThreadSync: the layer offsets must rise from 0 to the arena's ",
                                                this->arena_, " floats; got ", offsets_.size(), " offsets"));
    finals_ = std::make_unique<OnCacheLine<std::atomic<std::uint32_t>>[]>(layers());
    marked_ = std::make_unique<std::atomic<bool>[]>(layers() * Replicas);
  }

  // Called on the training loop before every micro-batch (and before a flush), while no
  // replica runs: only the group's last micro-batch marks layers final.
  void begin_reduction(bool reducing) {
    reducing_ = reducing;
    for (std::size_t l = 0; l < layers(); ++l) finals_[l].value.store(0, std::memory_order_relaxed);
    for (std::size_t i = 0; i < layers() * Replicas; ++i) marked_[i].store(false, std::memory_order_relaxed);
    claimed_.value.store(0, std::memory_order_relaxed);
    for (auto& w : waited_) w.value = 0;
  }
  void layer_done(int r, std::size_t layer) {
    if (reducing_) mark(r, layer);
  }
  // Replica r's backward is over: every layer of its arena is final (a partial group flushed
  // at the end of an epoch marks them all here). Returns at once; the update waits per layer.
  void gradients_ready(int r) {
    for (std::size_t l = layers(); l-- > 0;) mark(r, l);
  }
  // Returns when every replica's gradients over arena floats [begin, end) are final. Throws
  // GroupAborted when another replica failed, CommError after the group's timeout.
  void wait_final(int r, std::size_t begin, std::size_t end) {
    if (begin >= end) return;
    for (std::size_t l = layer_of(end - 1) + 1; l-- > layer_of(begin);) wait_layer(r, l);
  }
  // The first of the next `units` units of the update's shared work (counted from 0 each step).
  [[nodiscard]] std::size_t claim(std::size_t units) {
    return claimed_.value.fetch_add(units, std::memory_order_relaxed);
  }
  // How long replica r's update has waited for other replicas' layers this step (ns).
  [[nodiscard]] std::int64_t waited_ns(int r) const { return waited_[std::size_t(r)].value; }

  [[nodiscard]] std::span<float const* const> summands(int) const { return this->gradients_; }
  [[nodiscard]] static constexpr int num_replicas_in_sync() { return base::local_replicas; }

 private:
  [[nodiscard]] std::size_t layers() const { return offsets_.size() - 1; }
  [[nodiscard]] std::size_t layer_of(std::size_t at) const {
    return std::size_t(std::upper_bound(offsets_.begin(), offsets_.end(), at) - offsets_.begin()) - 1;
  }

  void mark(int r, std::size_t layer) {
    std::atomic<bool>& marked = marked_[std::size_t(r) * layers() + layer];  // written by replica r only
    if (marked.load(std::memory_order_relaxed)) return;
    marked.store(true, std::memory_order_relaxed);
    auto& word = finals_[layer].value;
    bool const last = word.fetch_add(1, std::memory_order_acq_rel) + 1 == std::uint32_t(Replicas);
    if (Replicas > 1 && last) comm::detail::wake_all(word);  // one replica never waits
  }

  void wait_layer(int r, std::size_t layer) {
    auto& word = finals_[layer].value;
    auto final = [](std::uint32_t marks) { return marks == std::uint32_t(Replicas); };
    if (final(word.load(std::memory_order_acquire))) return;
    comm::Rendezvous& rendezvous = this->group_->rendezvous();
    auto const begin = comm::detail::Clock::now();
    auto const deadline = begin + rendezvous.timeout();
    // Sleeps in slices of a millisecond, so that an abort (which wakes only its own word) is seen.
    for (;;) {
      auto const slice = std::min(deadline, comm::detail::Clock::now() + std::chrono::milliseconds(1));
      if (comm::detail::wait_for(word, final, slice, comm::detail::spin_budget(Replicas))) break;
      rendezvous.throw_if_aborted();
      if (comm::detail::Clock::now() >= deadline) time_out(r, layer);
    }
    auto const waited = comm::detail::Clock::now() - begin;
    waited_[std::size_t(r)].value += std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count();
  }

  [[noreturn]] void time_out(int r, std::size_t layer) {
    std::string late;
    for (int q = 0; q < Replicas; ++q)
      if (!marked_[std::size_t(q) * layers() + layer].load(std::memory_order_relaxed))
        late += (late.empty() ? "" : ", ") + std::to_string(q);
    std::string const message = strata::detail::message(
        "ThreadSync: replica ", r, " waited ", this->group_->rendezvous().timeout().count(),
        " ms for the gradients of layer ", layer, " from replica(s) ", late,
        ", which did not finish backward; raise the strategy's timeout if a step may take that long");
    this->group_->rendezvous().abort(message);
    throw CommError(message);
  }

  std::vector<std::size_t> offsets_;  // layer l's gradients are arena floats [offsets_[l], offsets_[l + 1])
  std::unique_ptr<OnCacheLine<std::atomic<std::uint32_t>>[]> finals_;  // per layer: replicas that finished it
  std::unique_ptr<std::atomic<bool>[]> marked_;  // [replica * layers + layer]: that replica finished it
  OnCacheLine<std::atomic<std::size_t>> claimed_;
  std::array<OnCacheLine<std::int64_t>, Replicas> waited_{};
  bool reducing_ = true;
};

// Any Communicator: replica r's arena is all-reduced over `make_communicator(r)` (rank r of
// its process, in a world of local replicas × processes) bucket by bucket during backward.
// Then every replica's arena holds the sum, and reduce() only scales the owner's slice.
// Broadcasts the chief's weights and optimizer state to every process over `processes` (a
// communicator with one rank per process), after checking that every process holds the
// same number of them: a model or optimizer of another shape is a ConfigError naming both
// sizes on every process, never a hang in a collective of mismatched lengths.
template <comm::Communicator Processes, class State>
void share_from_chief(Processes& processes, std::span<float> weights, State& state) {
  auto check_same_size = [&](char const* what, std::size_t count) {
    std::vector<std::uint64_t> counts(std::size_t(processes.size()));
    std::uint64_t const mine = count;
    processes.all_gather(std::as_bytes(std::span<std::uint64_t const>(&mine, 1)),
                         std::as_writable_bytes(std::span<std::uint64_t>(counts)));
    for (std::size_t p = 1; p < counts.size(); ++p)
      if (counts[p] != counts[0])
        throw ConfigError(strata::detail::message("MultiWorkerMirrored: process 0 (the chief) has ", counts[0],
                                                  " floats of ", what, " but process ", p, " has ", counts[p],
                                                  "; every worker must build the same model and optimizer"));
  };
  check_same_size("weights", weights.size());
  processes.broadcast(weights, 0);
  state.for_each_slot([&](char const* name, AlignedBuffer& slot) {
    check_same_size(name, slot.size());
    processes.broadcast(std::span<float>(slot.data(), slot.size()), 0);
  });
}

template <class Comm, int Replicas, std::size_t BucketBytes, class Wire = float>
  requires comm::Communicator<Comm>
class CommunicatorSync : public ReplicaArenas<Replicas> {
  using base = ReplicaArenas<Replicas>;
  using Buckets = comm::BucketedAllReduce<Comm, Wire>;

 public:
  using wire_type = Wire;  // what a gradient travels as: float, or bf16/fp16 under Compress<T>

  template <class MakeCommunicator>
  CommunicatorSync(comm::ThreadGroup& group, std::span<float> model_gradients,
                   std::span<std::size_t const> layer_offsets, MakeCommunicator&& make_communicator,
                   comm::Overlap overlap = comm::Overlap::comm_thread)
      : base(group, model_gradients), layers_(layer_offsets.size() - 1) {
    for (int r = 0; r < base::local_replicas; ++r) {
      communicators_[std::size_t(r)] = std::make_unique<Comm>(make_communicator(r));
      buckets_[std::size_t(r)] = std::make_unique<Buckets>(
          *communicators_[std::size_t(r)], comm::BucketPlan(layer_offsets, BucketBytes),
          std::span<float>(this->gradients_[std::size_t(r)], this->arena_), comm::ReduceOp::sum, overlap);
    }
    world_ = communicators_[0]->size();
    first_ = communicators_[0]->rank();
    if (world_ % base::local_replicas != 0)
      throw ConfigError(strata::detail::message("CommunicatorSync: a world of ", world_,
                                                " replicas is not a whole number of processes of ",
                                                base::local_replicas));
  }

  // Called before a micro-batch's backward: only the group's last micro-batch starts
  // buckets, so accumulation stays local.
  void begin_reduction(bool reducing) { reducing_ = reducing; }
  void layer_done(int r, std::size_t layer) {
    if (!reducing_) return;
    buckets_[std::size_t(r)]->layer_done(layer);
    started_[std::size_t(r)].value = true;
  }
  void gradients_ready(int r) {
    auto& buckets = *buckets_[std::size_t(r)];
    if (!started_[std::size_t(r)].value)  // a partial group flushed at the end of an epoch
      for (std::size_t layer = layers_; layer-- > 0;) buckets.layer_done(layer);
    buckets.finish();
    started_[std::size_t(r)].value = false;
    this->barrier(r);
  }
  // After the all-reduce each replica's own arena holds the sum.
  [[nodiscard]] std::span<float const* const> summands(int r) const {
    return std::span<float const* const>(this->gradients_).subspan(std::size_t(r), 1);
  }
  [[nodiscard]] int num_replicas_in_sync() const { return world_; }
  [[nodiscard]] int first_replica() const { return first_; }
  [[nodiscard]] comm::BucketPlan const& bucket_plan() const { return buckets_[0]->plan(); }
  // Profiling (profile/): each bucket's collective times, for replica r's last reduction.
  void time_buckets(bool on) {
    for (auto& b : buckets_) b->time_buckets(on);
  }
  [[nodiscard]] auto bucket_timings(int r) const { return buckets_[std::size_t(r)]->timings(); }

  // A communicator that crosses processes (comm::WorkerCommunicator) makes every process's
  // weights and optimizer state the chief's (share_from_chief above).
  template <class State>
  void share_from_chief(std::span<float> weights, State& state) {
    if constexpr (requires(Comm& c) { c.across_processes(); })
      train::share_from_chief(communicators_[0]->across_processes(), weights, state);
  }

 private:
  std::array<std::unique_ptr<Comm>, base::local_replicas> communicators_;
  std::array<std::unique_ptr<Buckets>, base::local_replicas> buckets_;
  std::array<OnCacheLine<bool>, base::local_replicas> started_{};
  std::size_t layers_ = 0;
  int world_ = 1;
  int first_ = 0;
  bool reducing_ = true;

};

// The sync a strategy uses on a device, chosen by specialisation on the policy tags.
template <class Strategy, class Device, class Bucket, class Compression>
struct GradientSync {
  static_assert(policy::dependent_false<Strategy>,
                "strata: no gradient sync is written for this strategy on this device yet (docs/roadmap.md)");
};
// The strategies whose replicas all live in this process.
template <class Strategy>
concept InProcessStrategy =
    Strategy::kind == policy::StrategyKind::one_device || Strategy::kind == policy::StrategyKind::mirrored;

// CentralStorage<N> on the CPU: the variables' one copy is in host memory, the N replica
// threads reduce their gradients into it and its update is applied once, each weight by
// one thread. That is exactly the step Mirrored<N> runs on the host
// (one shared copy, no collective), so the two share it. On Cuda, where Mirrored keeps a
// copy per GPU, CentralStorage keeps the variables on the host (train/central_storage_cuda.hpp).
template <class Strategy>
concept CentralStorageStrategy = Strategy::kind == policy::StrategyKind::central_storage;

template <CentralStorageStrategy Strategy, class Bucket, class Compression>
struct GradientSync<Strategy, policy::Cpu, Bucket, Compression> {
  static_assert(Bucket::bytes == policy::default_bucket_bytes,
                "strata::BucketBytes<B> has no effect on CentralStorage<N> on strata::Cpu: its replicas reduce "
                "into the central copy in place, with no buckets to size; drop BucketBytes<B>");
  static_assert(std::is_same_v<Compression, policy::NoCompression>,
                "strata::Compress<T> has no effect on CentralStorage<N> on strata::Cpu: its replicas reduce into "
                "the central copy in place and no gradient crosses a wire; drop Compress<T>");
  using type = ThreadSync<Strategy::replicas>;
};

template <InProcessStrategy Strategy, class Bucket, class Compression>
struct GradientSync<Strategy, policy::Cpu, Bucket, Compression> {
  static_assert(Bucket::bytes == policy::default_bucket_bytes,
                "strata::BucketBytes<B> has no effect on OneDevice or Mirrored<N> on strata::Cpu: their replicas "
                "read each other's gradients in place, with no buckets to size; drop BucketBytes<B> (it sizes the "
                "buckets of strategies whose gradients cross a Communicator)");
  static_assert(std::is_same_v<Compression, policy::NoCompression>,
                "strata::Compress<T> has no effect on OneDevice or Mirrored<N> on strata::Cpu: their replicas read "
                "each other's gradients in place and no gradient crosses a wire; drop Compress<T> (it compresses "
                "the gradients of MultiWorkerMirrored<N>, which cross processes)");
  using type = ThreadSync<Strategy::replicas>;
};

template <class Config>
using gradient_sync_t = typename GradientSync<typename Config::strategy, typename Config::device,
                                              typename Config::bucket, typename Config::compression>::type;

}  // namespace strata::train
