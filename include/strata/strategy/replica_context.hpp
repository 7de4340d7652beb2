#pragma once
// ReplicaContext: what the function given to Strategy::run can do with the other replicas
// (tf.distribute's ReplicaContext): know its id, wait for the others, all-reduce in place.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>

#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_group.hpp"
#include "strata/core/error.hpp"

namespace strata::strategy {

class ReplicaContext {
 public:
  ReplicaContext(comm::ThreadGroup& group, int replica) : group_(&group), replica_(replica) {}

  [[nodiscard]] int replica_id_in_sync_group() const { return replica_; }
  [[nodiscard]] int num_replicas_in_sync() const { return group_->size(); }

  void barrier() { group_->barrier(); }

  // The part of an array of `size` elements this replica reduces and updates.
  [[nodiscard]] comm::Slice owned_slice(std::size_t size) const { return comm::owned_slice(size, group_->size(), replica_); }

  // In place: afterwards every replica's `data` holds op over all replicas' `data`.
  // Each replica reduces its own slice (reduce-scatter) and writes it to all (all-gather),
  // summing in replica order, so the result is bitwise deterministic. Sizes must agree.
  void all_reduce(std::span<float> data, comm::ReduceOp op) {
    int const n = group_->size();
    if (n == 1) return;  // one replica: sum, mean, max and min of one value are the value
    group_->publish(replica_, data.data(), data.size());
    group_->barrier();
    for (int r = 0; r < n; ++r)
      if (group_->peer_size(r) != data.size()) throw size_mismatch(n);
    comm::Slice const mine = owned_slice(data.size());
    float const scale = op == comm::ReduceOp::mean ? 1.0f / float(n) : 1.0f;
    float* const* peers = group_->peers();
    constexpr std::size_t chunk = 1024;
    alignas(64) float reduced[chunk];
    for (std::size_t begin = mine.begin; begin < mine.end; begin += chunk) {
      std::size_t const end = std::min(mine.end, begin + chunk);
      comm::reduce_range(peers, n, begin, end, op, scale, reduced);
      for (int r = 0; r < n; ++r) std::copy(reduced, reduced + (end - begin), peers[r] + begin);
    }
    group_->barrier();
  }

 private:
  [[nodiscard]] CommError size_mismatch(int n) const {
    std::string sizes;
    for (int r = 0; r < n; ++r) sizes += (r ? ", " : "") + std::to_string(group_->peer_size(r));
    return CommError("all_reduce: replicas passed buffers of different sizes (replica 0.." + std::to_string(n - 1) +
                     ": " + sizes + " floats); every replica must reduce the same number of elements");
  }

  comm::ThreadGroup* group_;
  int replica_;
};

}  // namespace strata::strategy
