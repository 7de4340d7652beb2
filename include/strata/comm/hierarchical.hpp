#pragma once
// Hierarchical<Local, Global>: one communicator over processes × replicas-per-process. An
// all_reduce reduces inside the process first (each local replica its own slice), then
// all-reduces that slice across processes on the Global communicator that joins the
// replicas with the same local rank, then shares the slices inside the process. Only
// 1/local_size of the data crosses processes per replica, and the local replicas cross
// in parallel on their own connections.
//
// Rank = process * local_size + local rank. Every process must have the same local size.
// The sum is taken in a tree (local first), so its bits differ from a flat rank-order sum
// by rounding; 16-bit results are rounded after each stage.

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "strata/comm/communicator.hpp"
#include "strata/comm/thread_communicator.hpp"

namespace strata::comm {

// A local communicator that can reduce into, and share, the slice each rank owns
// (ThreadCommunicator's two halves of all_reduce).
template <class C>
concept SliceOwning = Communicator<C> && requires(C& c, std::span<float const> in, std::span<float> out) {
  c.reduce_owned(in, out, ReduceOp::sum);
  c.share_owned(out);
};

template <SliceOwning Local, Communicator Global>
class Hierarchical {
 public:
  // `local`: this replica among its process's replicas. `global`: this replica among the
  // replicas with its local rank in every process (an MPI communicator per local rank).
  Hierarchical(Local& local, Global& global) : local_(&local), global_(&global) {}

  [[nodiscard]] int rank() const { return global_->rank() * local_->size() + local_->rank(); }
  [[nodiscard]] int size() const { return global_->size() * local_->size(); }

  template <Reducible T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    all_reduce(std::span<T const>(data), data, op);
  }
  template <Reducible T>
  void all_reduce(std::span<T const> in, std::span<T> out, ReduceOp op) {
    ReduceOp const stage_op = op == ReduceOp::mean ? ReduceOp::sum : op;
    local_->reduce_owned(in, out, stage_op);
    Slice const mine = owned_slice(out.size(), local_->size(), local_->rank());
    std::span<T> slice = out.subspan(mine.begin, mine.size());
    global_->all_reduce(slice, stage_op);
    if (op == ReduceOp::mean) {
      float const scale = 1.0f / float(size());
      for (T& x : slice) x = T(float(x) * scale);
    }
    local_->share_owned(out);
  }

  // Through a full all_reduce into scratch: twice the traffic of a native reduce_scatter.
  template <Reducible T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, ReduceOp op) {
    if (in.size() != std::size_t(size()) * out.size())
      throw CommError("Hierarchical: " + describe_call<T>(Collective::reduce_scatter, in.size(), out.size(), op).describe() +
                      ": " + malformed(describe_call<T>(Collective::reduce_scatter, in.size(), out.size(), op), size()));
    std::vector<T>& scratch = scratch_for<T>();
    scratch.resize(in.size());
    all_reduce(in, std::span<T>(scratch), op);
    std::copy_n(scratch.begin() + std::ptrdiff_t(std::size_t(rank()) * out.size()), out.size(), out.begin());
  }

  // Gathers this process's blocks locally, then the processes' runs of blocks globally.
  template <Movable T>
  void all_gather(std::span<T const> in, std::span<T> out) {
    std::size_t const run = in.size() * std::size_t(local_->size());
    if (out.size() != std::size_t(size()) * in.size())
      throw CommError("Hierarchical: " + describe_call<T>(Collective::all_gather, in.size(), out.size()).describe() +
                      ": " + malformed(describe_call<T>(Collective::all_gather, in.size(), out.size()), size()));
    std::span<T> mine = out.subspan(std::size_t(global_->rank()) * run, run);
    local_->all_gather(in, mine);
    global_->all_gather(std::span<T const>(mine), out);
  }

  // From root's process to the replica with root's local rank everywhere, then locally.
  template <Movable T>
  void broadcast(std::span<T> data, int root) {
    if (root < 0 || root >= size())
      throw CommError("Hierarchical: broadcast: root " + std::to_string(root) + " is not a rank (0.." +
                      std::to_string(size() - 1) + ")");
    int const root_process = root / local_->size(), root_local = root % local_->size();
    if (local_->rank() == root_local) global_->broadcast(data, root_process);
    local_->broadcast(data, root_local);
  }

  // Everyone in the process, then everyone with this local rank: all ranks have arrived.
  void barrier() {
    local_->barrier();
    global_->barrier();
  }

 private:
  template <class T>
  std::vector<T>& scratch_for() {
    if constexpr (std::is_same_v<T, float>) return scratch_f32_;
    else if constexpr (std::is_same_v<T, bf16>) return scratch_bf16_;
    else return scratch_fp16_;
  }

  Local* local_;
  Global* global_;
  std::vector<float> scratch_f32_;
  std::vector<bf16> scratch_bf16_;
  std::vector<fp16> scratch_fp16_;
};

}  // namespace strata::comm
