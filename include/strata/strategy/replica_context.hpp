#pragma once
// ReplicaContext: what the function given to Strategy::run can do with the other replicas
// (tf.distribute's ReplicaContext): know its id, wait for the others, and call collectives
// on its replica group (a ThreadCommunicator: see comm/thread_communicator.hpp).

#include <cstddef>
#include <span>

#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_communicator.hpp"
#include "strata/comm/thread_group.hpp"

namespace strata::strategy {

class ReplicaContext {
 public:
  ReplicaContext(comm::ThreadGroup& group, int replica) : comm_(group.communicator(replica)) {}

  [[nodiscard]] int replica_id_in_sync_group() const { return comm_.rank(); }
  [[nodiscard]] int num_replicas_in_sync() const { return comm_.size(); }

  void barrier() { comm_.barrier(); }

  // The part of an array of `size` elements this replica reduces and updates.
  [[nodiscard]] comm::Slice owned_slice(std::size_t size) const {
    return comm::owned_slice(size, comm_.size(), comm_.rank());
  }

  // In place: afterwards every replica's `data` holds op over all replicas' `data`, summed
  // in replica order (bitwise deterministic). Sizes must agree (CommError otherwise).
  void all_reduce(std::span<float> data, comm::ReduceOp op) { comm_.all_reduce(data, op); }

  // The replica group's communicator, for the other collectives.
  [[nodiscard]] comm::ThreadCommunicator& communicator() { return comm_; }

 private:
  comm::ThreadCommunicator comm_;
};

}  // namespace strata::strategy
