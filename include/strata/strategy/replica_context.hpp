#pragma once
// ReplicaContext: what the function given to Strategy::run can do with the other replicas
// (tf.distribute's ReplicaContext): know its id, wait for the others, and call collectives
// on the replicas in sync. Its communicator is the strategy's: the replica threads of this
// process (comm::ThreadCommunicator), or, for MultiWorkerMirrored, every replica of every
// process (comm::WorkerCommunicator). `strata::ReplicaContext` is the first; a function
// written for any strategy takes `auto& context` (or `Strategy<...>::context_type&`).
// Under a profile::LoopProfiler each all_reduce is timed (an all-reduce span of the replica,
// with its bytes); otherwise it tests one null pointer.

#include <cstddef>
#include <span>
#include <type_traits>

#include "strata/comm/communicator.hpp"
#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_communicator.hpp"
#include "strata/profile/probe.hpp"

namespace strata::strategy {

template <class Comm>
class BasicReplicaContext {
 public:
  // `local_replica` of the `local_replicas` threads of this process.
  BasicReplicaContext(Comm& comm, int local_replica, int local_replicas)
      : comm_(&comm), local_replica_(local_replica), local_replicas_(local_replicas) {}

  // Among every replica of the job (process × local replicas + local replica).
  [[nodiscard]] int replica_id_in_sync_group() const { return comm_->rank(); }
  [[nodiscard]] int num_replicas_in_sync() const { return comm_->size(); }
  // Among the replica threads of this process.
  [[nodiscard]] int local_replica_id() const { return local_replica_; }
  [[nodiscard]] int local_replicas() const { return local_replicas_; }

  void barrier() { comm_->barrier(); }

  // The part of an array of `size` elements this replica updates. Each process holds its
  // own copy of the weights, so the slices divide the array among this process's replicas.
  [[nodiscard]] comm::Slice owned_slice(std::size_t size) const {
    return comm::owned_slice(size, local_replicas_, local_replica_);
  }

  // In place: afterwards every replica's `data` holds op over all replicas' `data` (of
  // every process), bitwise the same on every replica. Sizes must agree (CommError otherwise).
  // float, or bf16/fp16 (half the bytes on the wire; summed in fp32): a custom loop
  // compresses its gradients by rounding them into a 16-bit buffer (strata::store), reducing
  // that and widening it back (strata::load). The Compress<T> policy applies to the
  // trainer's gradient sync (train::StepRunner), not to the collectives a loop calls itself.
  void all_reduce(std::span<float> data, comm::ReduceOp op) {
    timed(data.size_bytes(), [&] { comm_->all_reduce(data, op); });
  }
  template <comm::Reducible T>
    requires(!std::is_same_v<T, float>)
  void all_reduce(std::span<T> data, comm::ReduceOp op) {
    timed(data.size_bytes(), [&] { comm_->all_reduce(data, op); });
  }

  // The communicator, for the other collectives (untimed).
  [[nodiscard]] Comm& communicator() { return *comm_; }

  // Times this replica's all_reduce calls from now on (Strategy::run, under a LoopProfiler).
  void time_collectives(profile::ReplicaTimer timer) { timer_ = timer; }

 private:
  // A collective of `bytes`, recorded as the replica's next all-reduce when timed.
  template <class F>
  void timed(std::size_t bytes, F&& collective) {
    if (!timer_) return collective();
    std::int64_t const begin = timer_.now();
    collective();
    timer_.record(profile::Phase::all_reduce, begin, timer_.now(), collectives_++, std::int64_t(bytes));
  }

  profile::ReplicaTimer timer_;
  int collectives_ = 0;  // timed so far in this run call
  Comm* comm_;
  int local_replica_;
  int local_replicas_;
};

using ReplicaContext = BasicReplicaContext<comm::ThreadCommunicator>;

}  // namespace strata::strategy
