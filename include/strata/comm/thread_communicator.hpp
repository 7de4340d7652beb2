#pragma once
// ThreadCommunicator: the collectives among N threads of one process, over shared memory.
//
// Each rank publishes its buffers, and after a barrier reduces the slice of the array it
// owns (reduce-scatter) from every peer's buffer into an L1-sized chunk, then writes that
// chunk into every peer's output (all-gather). Each element is therefore read and written
// once per rank, by one thread, summing in rank order: the result has the same bits on
// every run and whatever the thread timing. A second barrier keeps buffers alive until
// every peer is done with them.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/comm/communicator.hpp"
#include "strata/comm/reduce_op.hpp"
#include "strata/comm/rendezvous.hpp"
#include "strata/core/aligned_buffer.hpp"

namespace strata::comm {

// The half-open range [begin, end) of an array that one rank owns in a reduce-scatter.
struct Slice {
  std::size_t begin = 0;
  std::size_t end = 0;
  [[nodiscard]] std::size_t size() const { return end - begin; }
};

// Splits [0, size) into `parts` consecutive slices that start on cache lines (of floats).
inline Slice owned_slice(std::size_t size, int parts, int part) {
  std::size_t const chunk = round_up_to_line((size + std::size_t(parts) - 1) / std::size_t(parts));
  std::size_t const begin = std::min(size, chunk * std::size_t(part));
  return {begin, std::min(size, begin + chunk)};
}

// Reduces elements [slice) of every rank's input (ins[0..ranks)), in rank order, chunk by chunk
// while it is in L1, and writes them to outs[0..outs_count) at offset slice.begin - shift.
// An output may be an input (in place): each chunk is read before it is written.
template <class T>
void reduce_slice(T const* const* ins, int ranks, Slice slice, std::size_t shift, ReduceOp op, T* const* outs,
                  int outs_count) {
  constexpr std::size_t chunk = 1024;  // 4 KiB of fp32: reduced in L1, then written out
  float const scale = op == ReduceOp::mean ? 1.0f / float(ranks) : 1.0f;
  if (ranks == 1 && outs_count == 1 && outs[0] - shift == ins[0]) return;  // one rank, in place: nothing changes
  if constexpr (std::is_same_v<T, float>) {
    if (ranks == 2 && outs_count == 2 && (op == ReduceOp::sum || op == ReduceOp::mean)) {
      // Two ranks: one pass that reads both inputs and writes both outputs, the least
      // memory traffic there is. Same arithmetic as reduce_range: (a + b) * scale.
      T const* a = ins[0];
      T const* b = ins[1];
      T* x = outs[0] - shift;
      T* y = outs[1] - shift;
#if defined(__clang__)
#pragma clang loop vectorize(assume_safety)
#else
#pragma GCC ivdep
#endif
      for (std::size_t i = slice.begin; i < slice.end; ++i) x[i] = y[i] = (a[i] + b[i]) * scale;
      return;
    }
  }
  alignas(64) float reduced[chunk];
  for (std::size_t begin = slice.begin; begin < slice.end; begin += chunk) {
    std::size_t const end = std::min(slice.end, begin + chunk);
    reduce_range(ins, ranks, begin, end, op, scale, reduced);
    for (int r = 0; r < outs_count; ++r) {
      T* __restrict dst = outs[r] + (begin - shift);
      if constexpr (std::is_same_v<T, float>) std::memcpy(dst, reduced, (end - begin) * sizeof(float));
      else for (std::size_t i = 0; i < end - begin; ++i) dst[i] = T(reduced[i]);
    }
  }
}

class ThreadCommunicator {
 public:
  ThreadCommunicator(Rendezvous& world, int rank) : world_(&world), rank_(rank) {
    if (rank < 0 || rank >= world.size())
      throw ConfigError(strata::detail::message("ThreadCommunicator: rank ", rank, " is not in 0..", world.size() - 1));
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return world_->size(); }

  template <Reducible T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    all_reduce(std::span<T const>(data), data, op);
  }
  // Out of place; `in` may be `out`.
  template <Reducible T>
  void all_reduce(std::span<T const> in, std::span<T> out, ReduceOp op) {
    collective<T>(describe_call<T>(Collective::all_reduce, in.size(), out.size(), op), in.data(), out.data(),
                  [&](T const* const* ins, T* const* outs) {
                    Slice const mine = owned_slice(in.size(), size(), rank_);
                    reduce_slice(ins, size(), mine, 0, op, outs, size());
                  });
  }

  // in: size() blocks of out.size() elements; rank r receives op over ranks of block r.
  template <Reducible T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, ReduceOp op) {
    collective<T>(describe_call<T>(Collective::reduce_scatter, in.size(), out.size(), op), in.data(), out.data(),
                  [&](T const* const* ins, T* const*) {
                    T* mine[1] = {out.data()};
                    reduce_slice(ins, size(), {rank_ * out.size(), (rank_ + 1) * out.size()}, rank_ * out.size(), op, mine, 1);
                  });
  }

  // out: size() blocks of in.size() elements; block r is rank r's input.
  template <Movable T>
  void all_gather(std::span<T const> in, std::span<T> out) {
    collective<T>(describe_call<T>(Collective::all_gather, in.size(), out.size()), in.data(), out.data(),
                  [&](T const* const* ins, T* const*) {
                    for (int r = 0; r < size(); ++r) copy(ins[r], in.size(), out.data() + std::size_t(r) * in.size());
                  });
  }

  // Afterwards every rank's `data` holds root's.
  template <Movable T>
  void broadcast(std::span<T> data, int root) {
    collective<T>(describe_call<T>(Collective::broadcast, data.size(), data.size(), ReduceOp::sum, root), data.data(),
                  data.data(), [&](T const* const* ins, T* const*) {
                    if (rank_ != root) copy(ins[root], data.size(), data.data());
                  });
  }

  // The two halves of all_reduce, for engines built on this one (Hierarchical). After
  // reduce_owned, this rank's `out` holds the result on owned_slice(size, size(), rank())
  // only; share_owned then copies every other rank's slice of its `data` into this one's.
  template <Reducible T>
  void reduce_owned(std::span<T const> in, std::span<T> out, ReduceOp op) {
    collective<T>(describe_call<T>(Collective::reduce_owned, in.size(), out.size(), op), in.data(), out.data(),
                  [&](T const* const* ins, T* const*) {
                    T* mine[1] = {out.data()};
                    reduce_slice(ins, size(), owned_slice(in.size(), size(), rank_), 0, op, mine, 1);
                  });
  }
  template <Reducible T>
  void share_owned(std::span<T> data) {
    collective<T>(describe_call<T>(Collective::share_owned, data.size(), data.size()), data.data(), data.data(),
                  [&](T const* const* ins, T* const*) {
                    for (int r = 0; r < size(); ++r) {
                      Slice const s = owned_slice(data.size(), size(), r);
                      if (r != rank_) copy(ins[r] + s.begin, s.size(), data.data() + s.begin);
                    }
                  });
  }

  void barrier() {
    collective<float>(CallDescriptor{}, nullptr, nullptr, [](float const* const*, float* const*) {});
  }

 private:
  template <class T>
  static void copy(T const* from, std::size_t n, T* to) {
    if (n && from != to) std::memcpy(to, from, n * sizeof(T));
  }

  // Meets the other ranks (Rendezvous::collective) and runs body(inputs, outputs) on every
  // rank's published buffers.
  template <class T, class Body>
  void collective(CallDescriptor const& call, void const* in, void* out, Body body) {
    int const n = size();
    if (n == 1) {
      if (std::string const problem = malformed(call, 1); !problem.empty()) throw CommError(error_prefix(call) + problem);
      body_single<T>(call, in, out, body);
      return;
    }
    world_->collective(rank_, {call, in, out}, "ThreadCommunicator", [&] {
      T const* ins[max_stack_ranks];
      T* outs[max_stack_ranks];
      std::vector<T const*> ins_heap;
      std::vector<T*> outs_heap;
      T const** ip = ins;
      T** op = outs;
      if (n > max_stack_ranks) {
        ins_heap.resize(std::size_t(n));
        outs_heap.resize(std::size_t(n));
        ip = ins_heap.data();
        op = outs_heap.data();
      }
      for (int r = 0; r < n; ++r) {
        ip[r] = static_cast<T const*>(world_->entry(r).input);
        op[r] = static_cast<T*>(world_->entry(r).output);
      }
      body(ip, op);
    });
  }

  template <class T, class Body>
  void body_single(CallDescriptor const&, void const* in, void* out, Body& body) {
    // Two slots, though one rank uses one: the two-rank fast path is compiled here too.
    T const* ins[2] = {static_cast<T const*>(in), nullptr};
    T* outs[2] = {static_cast<T*>(out), nullptr};
    body(ins, outs);
  }

  std::string error_prefix(CallDescriptor const& call) const {
    return strata::detail::message("ThreadCommunicator: ", call.describe(), " on rank ", rank_, " of ", size(), ": ");
  }

  static constexpr int max_stack_ranks = 64;
  Rendezvous* world_;
  int rank_;
};

}  // namespace strata::comm
