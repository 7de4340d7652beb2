#pragma once
// SliceUpdate: the third part of a step (train/step_runner.hpp). Each replica applies the
// optimizer to the slice of the weights it owns, reading its slice of the reduced gradient
// through the GradientSync. Where the sync deals out work (ThreadSync: claim, wait_final),
// the replicas of the fused update below take its chunks instead, from the last layer back,
// as every replica's backward finishes them: no replica waits for another's whole backward.
//
// Without a global quantity the reduction and the update are fused: an element rule reads
// the replicas' gradients and sums them in its own loop, and each chunk of the slice is
// refreshed for the forward pass while it is still in L1. What needs the whole gradient
// before any weight moves takes one more barrier: a loss scale (a step with a non-finite
// gradient is skipped everywhere), clipping by the global norm, and layer-wise optimizers
// (Lamb's trust ratio per tensor). Then each replica reduces its slice into a shared buffer
// with its share of the squared norm, and the sync adds the shares in replica order, so all
// take the same decision.
//
// On the CPU a replica with intra-op threads (core/intra_op.hpp: OneDevice on a many-core
// machine) splits its slice's chunks over them: the element-wise work gives the same bits
// however it is split; the squared norm adds one partial sum per thread in thread order.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_communicator.hpp"
#include "strata/core/aligned_buffer.hpp"
#include "strata/core/intra_op.hpp"
#include "strata/nn/layer.hpp"
#include "strata/optim/element_rule.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/policy/device.hpp"
#include "strata/train/replica_pass.hpp"

namespace strata::train {

// The part of one parameter tensor inside one replica's owned slice.
struct Piece {
  std::size_t begin = 0, end = 0;
  std::size_t tensor = 0;  // its index in Model::parameter_tensors()
  bool decay = true;       // the optimizer's weight decay applies to it
};

// The pieces of `tensors` inside `mine`, in arena order: what every device's update walks.
template <class Opt>
std::vector<Piece> plan_pieces(std::vector<nn::ParameterTensor> const& tensors, comm::Slice mine, Opt const& optimizer) {
  std::vector<Piece> pieces;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    std::size_t const begin = std::max(tensors[t].offset, mine.begin);
    std::size_t const end = std::min(tensors[t].offset + nn::element_count(tensors[t].shape), mine.end);
    bool decay = true;
    if constexpr (requires { optimizer.decays(tensors[t].name); }) decay = optimizer.decays(tensors[t].name);
    if (begin < end) pieces.push_back({begin, end, t, decay});
  }
  return pieces;
}

// Four partial sums in a fixed order: the same result every run, and vectorizable.
inline double sum_of_squares(float const* x, std::size_t n) {
  double part[4] = {0.0, 0.0, 0.0, 0.0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (std::size_t k = 0; k < 4; ++k) part[k] += double(x[i + k]) * double(x[i + k]);
  for (; i < n; ++i) part[0] += double(x[i]) * double(x[i]);
  return (part[0] + part[1]) + (part[2] + part[3]);
}

// The update of a device: each replica updates its slice of the weights with `Opt`, for
// `Replicas` local replicas whose forward passes read the weights in T. Offers:
//   run(r, sync, scale, step, decide)   replica r's update (below); the gradient floats it reduced
//   forward_weights(r)                  the weights replica r's forward pass reads
//   resume()                            after the host weights or state were restored
//   sync_to_host()                      brings the host weights and state (checkpoints) up to date
// The Cuda form is in train/slice_update_cuda.hpp.
template <optim::Optimizer Opt, class Device, int Replicas, class T>
class SliceUpdate;

// On the CPU: one shared copy of the weights and the optimizer state, each replica
// writing only its slice of them.
template <optim::Optimizer Opt, int Replicas, class T>
class SliceUpdate<Opt, policy::Cpu, Replicas, T> {
 public:
  static constexpr bool layerwise = optim::LayerwiseOptimizer<Opt>;
  static constexpr std::size_t chunk_floats = 2048;  // 8 KiB: updated and refreshed while in L1
  static constexpr std::size_t piece_floats = 128;   // reduced through L1, where the rule cannot read the arenas

  // `weights`: the host weights, updated in place; `sync` gives the slice each replica owns.
  // `whole_gradient_first`: a global decision is taken on the whole reduced gradient before
  // any weight moves.
  template <class Sync>
  SliceUpdate(Opt const& optimizer, std::vector<nn::ParameterTensor> const& tensors, std::span<float> weights,
              Sync& sync, bool whole_gradient_first)
      : optimizer_(optimizer), state_(optimizer.make_state(weights.size())), weights_(weights.data()),
        arena_(weights.size()), forward_(weights, Replicas, tensors), whole_gradient_first_(whole_gradient_first || layerwise) {
    optimizer_.validate();
    std::size_t const arena = weights.size();
    for (int r = 0; r < Replicas; ++r) {
      pieces_[std::size_t(r)] = plan_pieces(tensors, sync.slice(r), optimizer_);
      chunks_[std::size_t(r)] = plan_chunks(tensors, pieces_[std::size_t(r)]);
      for (Piece const& piece : pieces_[std::size_t(r)])
        slice_floats_[std::size_t(r)] += std::int64_t(piece.end - piece.begin);
      if constexpr (layerwise) tensor_shares_[std::size_t(r)].resize(tensors.size());
    }
    if constexpr (Replicas > 1 && claims_chunks<Sync>) {
      all_pieces_ = plan_pieces(tensors, comm::Slice{0, arena}, optimizer_);
      all_chunks_ = plan_chunks(tensors, all_pieces_);
    }
    if (whole_gradient_first_) reduced_ = AlignedBuffer(arena);
  }

  // Replica r's update of its slice of the weights, from the sum over replicas of the
  // gradients times `scale`. `decide(squared_norm)` (called only when the whole gradient is
  // seen first) returns whether to `apply` and the clipping `factor` (StepProgress::decide).
  // Returns the floats of gradient it reduced.
  template <class Sync, class Decide>
  std::int64_t run(int r, Sync& sync, float scale, std::int64_t step, Decide&& decide) {
    std::int64_t const reduced_floats = update(r, sync, scale, step, decide);
    if (whole_gradient_first_) {  // (the fused update refreshes each chunk as it goes)
      comm::Slice const mine = sync.slice(r);
      forward_.refresh(mine.begin, mine.end);
    }
    return reduced_floats;
  }

  [[nodiscard]] float const* forward_weights(int r) const { return forward_(r); }
  // For the duration of replica r's task: the bf16 copy of the forward weights, where kept.
  [[nodiscard]] Bf16CopyBinding bind_copy(int r) const { return forward_.bind_copy(r); }
  void resume() { forward_.refresh(0, arena_); }
  void sync_to_host() {}  // the weights and state are the host's

  [[nodiscard]] Opt const& optimizer() const { return optimizer_; }
  [[nodiscard]] typename Opt::State& state() { return state_; }
  [[nodiscard]] typename Opt::State const& state() const { return state_; }

 private:
  // A sync whose replicas' gradients become final layer by layer, and which deals out shared
  // work (ThreadSync): the replicas take the update's chunks as they come free.
  template <class Sync>
  static constexpr bool claims_chunks = requires(Sync& sync, std::size_t n) {
    { sync.claim(n) } -> std::same_as<std::size_t>;
    sync.wait_final(0, n, n);
  };

  template <class Sync, class Decide>
  std::int64_t update(int r, Sync& sync, float scale, std::int64_t step, Decide&& decide) {
    float* const weights = weights_;
    std::int64_t const reduced_floats = slice_floats_[std::size_t(r)];
    auto info = [&](Piece const& piece) { return optim::StepInfo{step, 1.0f, piece.decay}; };
    auto slice_of = [&](std::size_t begin, std::size_t count) { return std::span<float>(weights + begin, count); };
    auto const summands = sync.summands(r);
    if constexpr (Replicas > 1 && claims_chunks<Sync>)
      if (!whole_gradient_first_) return update_claimed(r, sync, summands, scale, step);
    if constexpr (requires { sync.wait_final(r, std::size_t{}, std::size_t{}); }) {
      comm::Slice const mine = sync.slice(r);
      sync.wait_final(r, mine.begin, mine.end);  // what this replica's slice reads is final everywhere
    }
    if (!whole_gradient_first_) {  // fused: sum, update and refresh what forward reads, a chunk at a time
      for_each_chunk_split(r, [&](int, std::size_t begin, std::size_t count, Piece const& piece) {
        update_fused(summands, scale, begin, count, info(piece));
      });
      return reduced_floats;
    }
    std::array<double, max_parts> squares{};
    for_each_chunk_split(r, [&](int part, std::size_t begin, std::size_t count, Piece const&) {
      float* out = reduced_.data() + begin;
      reduce(summands, scale, begin, count, out);
      squares[std::size_t(part)] += sum_of_squares(out, count);
    });
    double squared_norm = 0.0;
    for (double const s : squares) squared_norm += s;  // part order: one answer for one split
    auto const decision = decide(sync.sum(r, squared_norm));
    if (!decision.apply) return reduced_floats;  // skipped on every replica alike
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
        shares[piece.tensor] += optimizer_.moments(slice_of(begin, count), gradient(begin, count), state_, begin, info(piece));
      });
      sync.barrier(r);
      for (Piece const& piece : pieces_[std::size_t(r)]) {
        optim::NormShares tensor;
        for (auto const& replica : tensor_shares_) tensor += replica[piece.tensor];  // replica order
        optimizer_.apply(slice_of(piece.begin, piece.end - piece.begin), state_, piece.begin, info(piece),
                         Opt::trust_ratio(tensor));
      }
    } else {
      for_each_chunk_split(r, [&](int, std::size_t begin, std::size_t count, Piece const& piece) {
        optimizer_.update(slice_of(begin, count), gradient(begin, count), state_, begin, info(piece));
      });
    }
    return reduced_floats;
  }

  // The fused update with the chunks shared out: replica r claims blocks of them, from the
  // arena's end (the last layer, which backward finishes first) to its start, waits until
  // every replica's gradients over a block are final, and updates it (split over its intra-op
  // threads). Returns the gradient floats it reduced.
  template <class Sync>
  std::int64_t update_claimed(int r, Sync& sync, std::span<float const* const> summands, float scale,
                              std::int64_t step) {
    IntraOpTeam const* const team = intra_op_team();
    std::size_t const block = std::size_t(min_chunks_per_part) * std::size_t(team ? std::max(1, team->threads) : 1);
    std::size_t const total = all_chunks_.size();
    std::int64_t floats = 0;
    for (std::size_t taken; (taken = sync.claim(block)) < total;) {
      std::size_t const last = total - taken, first = last - std::min(block, last);  // chunks [first, last)
      Chunk const& end = all_chunks_[last - 1];
      sync.wait_final(r, all_chunks_[first].begin, end.begin + end.count);
      run_split(int(last - first), min_chunks_per_part, [&](int from, int count) {
        for (std::size_t i = first + std::size_t(from); i < first + std::size_t(from + count); ++i) {
          Chunk const& c = all_chunks_[i];
          update_fused(summands, scale, c.begin, c.count, optim::StepInfo{step, 1.0f, all_pieces_[c.piece].decay});
        }
      });
      for (std::size_t i = first; i < last; ++i) floats += std::int64_t(all_chunks_[i].count);
    }
    return floats;
  }

  // out[0, count) = scale * (the sum of the summands over [begin, begin + count)).
  static void reduce(std::span<float const* const> summands, float scale, std::size_t begin, std::size_t count,
                     float* out) {
    comm::reduce_range(summands.data(), int(summands.size()), begin, begin + count, comm::ReduceOp::sum, scale, out);
  }

  // The update of weights [begin, begin + count) from scale * (the sum of the summands). An
  // element rule reads one or two arenas in its own loop: the gradients, weights and state
  // stream from memory together. Otherwise the sum goes through L1 in pieces small enough
  // that those streams still interleave. Where memory is slow, a reduce of the whole chunk
  // first, then its update, took 1.2-1.4x as long; where it is fast, as long
  // (docs/benchmarks.md).
  void update_summed(std::span<float const* const> summands, float scale, std::size_t begin, std::size_t count,
                     optim::StepInfo info) {
    std::span<float> const weights(weights_ + begin, count);
    if constexpr (optim::ElementwiseOptimizer<Opt> && !layerwise) {
      if (summands.size() <= 2) {
        optim::SummedGradient const g{summands[0] + begin, summands.size() == 2 ? summands[1] + begin : nullptr, scale};
        optim::apply_rule(optimizer_.rule(info), weights, g, state_, begin);
        return;
      }
    }
    alignas(64) float reduced[piece_floats];
    for (std::size_t at = 0; at < count; at += piece_floats) {
      std::size_t const n = std::min(piece_floats, count - at);
      reduce(summands, scale, begin + at, n, reduced);
      optimizer_.update(weights.subspan(at, n), std::span<float const>(reduced, n), state_, begin + at, info);
    }
  }

  // One chunk of the fused update: sum, update, and refresh what forward reads while it is in L1.
  void update_fused(std::span<float const* const> summands, float scale, std::size_t begin, std::size_t count,
                    optim::StepInfo info) {
    update_summed(summands, scale, begin, count, info);
    forward_.refresh(begin, begin + count);
  }

  // Calls f(begin, count, piece) for each chunk of replica r's pieces, in order.
  template <class F>
  void for_each_chunk(int r, F&& f) {
    for (Chunk const& c : chunks_[std::size_t(r)]) f(c.begin, c.count, pieces_[std::size_t(r)][c.piece]);
  }
  // The same, with the chunks split in order into one run per intra-op thread of the replica
  // (one run without any): f(part, begin, count, piece). Small slices are not split.
  template <class F>
  void for_each_chunk_split(int r, F&& f) {
    auto const& chunks = chunks_[std::size_t(r)];
    int const parts = std::min(max_parts, intra_op_parts(int(chunks.size()), min_chunks_per_part));
    run_intra_op(parts, [&](int part) {
      auto const [first, count] = split_columns(int(chunks.size()), parts, part);
      for (int i = first; i < first + count; ++i) {
        Chunk const& c = chunks[std::size_t(i)];
        f(part, c.begin, c.count, pieces_[std::size_t(r)][c.piece]);
      }
    });
  }

  struct Chunk {
    std::size_t begin = 0, count = 0;
    std::size_t piece = 0;  // its index in the pieces it was cut from
  };
  // `pieces` cut into chunks of at most chunk_floats. Chunks start at multiples of chunk_floats
  // into their tensor, wherever the pieces start: whole pairs of a matrix's columns, which the
  // refresh of a packed copy writes fastest (ReplicaWeights).
  static std::vector<Chunk> plan_chunks(std::vector<nn::ParameterTensor> const& tensors,
                                        std::vector<Piece> const& pieces) {
    std::vector<Chunk> chunks;
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      Piece const& piece = pieces[p];
      std::size_t const origin = tensors[piece.tensor].offset;
      for (std::size_t begin = piece.begin; begin < piece.end;) {
        std::size_t const end = std::min(piece.end, origin + ((begin - origin) / chunk_floats + 1) * chunk_floats);
        chunks.push_back({begin, end - begin, p});
        begin = end;
      }
    }
    return chunks;
  }
  static constexpr int max_parts = 64;
  static constexpr int min_chunks_per_part = 16;  // 128 KiB of weights: worth a hand-off

  Opt optimizer_;
  typename Opt::State state_;
  float* weights_;
  std::size_t arena_;
  ReplicaWeights<policy::Cpu, T> forward_;  // what forward reads: the weights, or rounded to T
  bool whole_gradient_first_;
  std::array<std::vector<Piece>, Replicas> pieces_;
  std::array<std::int64_t, Replicas> slice_floats_{};  // gradient floats of each replica's pieces
  std::array<std::vector<Chunk>, Replicas> chunks_;  // each replica's pieces in chunks, in arena order
  std::vector<Piece> all_pieces_;  // the whole arena's, where the replicas claim chunks
  std::vector<Chunk> all_chunks_;
  AlignedBuffer reduced_;  // the reduced gradient, when reduced before updating
  std::array<std::vector<optim::NormShares>, Replicas> tensor_shares_;  // Lamb: per tensor, per replica
};

}  // namespace strata::train
