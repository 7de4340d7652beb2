#pragma once
// SliceUpdate on the Cuda device (train/slice_update.hpp says what it offers). Included by
// strata/cuda.hpp.
//
// The weights and the optimizer state live in device memory: one copy shared by logical
// replicas on one GPU, or one copy per GPU (DeviceSync's layout). Each replica takes its
// slice of the reduced gradient from the sync, decides globally where it must (the loss
// scale's finiteness and clipping: a sum of squares per replica, added in replica order),
// and runs the optimizer's element rule on each piece of its slice as a kernel compiled
// from the rule's own text (optim/element_rule_cuda.hpp): the CPU's arithmetic. A layer-wise
// optimizer (Lamb) takes two phases with its tensors' norms summed across replicas between.
//
// The host copies of the weights and optimizer state (what checkpoints read) are brought up
// to date by sync_to_host(); resume() sends them to the device. Across GPUs every copy of
// the weights is whole after the all-gather, while each GPU's optimizer state is current
// only on its own slice (ZeRO stage 1's partitioning of the state's updates).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "strata/cuda/context.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/runtime.hpp"
#include "strata/nn/layer.hpp"
#include "strata/optim/element_rule.hpp"
#include "strata/optim/element_rule_cuda.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/policy/device.hpp"
#include "strata/train/gradient_sync_cuda.hpp"
#include "strata/train/slice_update.hpp"

namespace strata::train {

// An optimizer runs on the device through its element rule (optim/element_rule.hpp).
template <class Opt>
inline constexpr bool has_device_update = optim::ElementwiseOptimizer<Opt> || optim::LayerwiseRuleOptimizer<Opt>;

template <optim::Optimizer Opt, int Replicas, class T>
class SliceUpdate<Opt, policy::Cuda, Replicas, T> {
  static_assert(has_device_update<Opt>,
                "strata::Cuda: this optimizer has no element rule, so it runs on strata::Cpu only; give it one "
                "with STRATA_ELEMENT_RULE and a rule(StepInfo) member, and the GPU runs the CPU's arithmetic "
                "(docs/gpu.md)");
  static constexpr bool layerwise = optim::LayerwiseRuleOptimizer<Opt>;
  using Sync = DeviceSync<Replicas>;

 public:
  SliceUpdate(Opt const& optimizer, std::vector<nn::ParameterTensor> const& tensors, std::span<float> weights,
              Sync& sync, bool whole_gradient_first)
      : optimizer_(optimizer), state_(optimizer.make_state(weights.size())), host_(weights), sync_(&sync),
        whole_gradient_first_(whole_gradient_first) {
    optimizer_.validate();
    std::size_t const arena = weights.size();
    for (int c = 0; c < sync.copies(); ++c) {  // the weights: one copy, or one per GPU
      int const device = sync.device_of(c);
      copies_.emplace_back();
      copies_.back().params = cuda::DeviceBuffer<float>(sync.padded(), device, true);
      state_.for_each_slot([&](char const*, AlignedBuffer&) { copies_.back().slots.emplace_back(arena, device, true); });
      copies_.back().stream = cuda::Stream(device);
    }
    for (int r = 0; r < Replicas; ++r) {
      pieces_[std::size_t(r)] = plan_pieces(tensors, sync.slice(r), optimizer_);
      for (Piece const& piece : pieces_[std::size_t(r)])
        slice_floats_[std::size_t(r)] += std::int64_t(piece.end - piece.begin);
      if constexpr (layerwise) {
        std::size_t const n = pieces_[std::size_t(r)].size();
        LayerwiseScratch& s = layerwise_[std::size_t(r)];
        int const device = sync.device_of(r);
        s.partials = cuda::DeviceBuffer<double>(2 * std::size_t(cuda::sum_blocks), device);
        s.sums = cuda::DeviceBuffer<double>(std::max<std::size_t>(1, 2 * n), device);
        s.readback = cuda::PinnedBuffer<double>(std::max<std::size_t>(1, 2 * n));
        s.tensors.resize(tensors.size());
      }
    }
    resume();
  }

  // Replica r's update of its slice, on its (bound) context; returns the gradient floats it
  // reduced. The weights are updated before it returns: the next forward may read them.
  template <class Decide>
  std::int64_t run(int r, Sync& sync, float scale, std::int64_t step, Decide&& decide) {
    cuda::Context& c = cuda::current_context();
    comm::Slice const mine = sync.slice(r);
    std::size_t const n = mine.end - mine.begin;
    float* const reduced = sync.reduce(r, scale);
    if (whole_gradient_first_) {
      auto const decision = decide(sync.sum(r, n > 0 ? c.sum_of_squares(reduced, n) : 0.0));
      if (!decision.apply) {  // skipped on every replica alike
        c.synchronize();
        return slice_floats_[std::size_t(r)];
      }
      if (decision.factor != 1.0f && n > 0)
        c.launch(cuda::Kernel::scale, std::int64_t(n), reduced, (long long)n, decision.factor);
    }
    if constexpr (layerwise) apply_layerwise(c, r, step);
    else
      for (Piece const& piece : pieces_[std::size_t(r)]) apply(c, r, piece, step);
    sync.share_updated_slice(r, copy_of(r).params.data());
    c.synchronize();  // the weights are updated before anyone's next forward
    return slice_floats_[std::size_t(r)];
  }

  [[nodiscard]] float const* forward_weights(int r) const { return copies_[std::size_t(sync_->copy_of(r))].params.data(); }

  // Sends the host weights and optimizer state (restored, or as the model was given) to
  // every copy.
  void resume() {
    for (WeightCopy& copy : copies_) {
      cuda::DeviceScope const on(copy.params.device());
      cudaStream_t const stream = copy.stream.get();
      cuda::copy_to_device(copy.params.data(), host_.data(), host_.size(), stream);
      std::size_t i = 0;
      state_.for_each_slot([&](char const*, AlignedBuffer& host) {
        cuda::copy_to_device(copy.slots[i++].data(), host.data(), host.size(), stream);
      });
      copy.stream.synchronize();
    }
  }

  // Copies the device weights and optimizer state into the host's: the weights from the
  // first copy (every copy is whole), each slice of the state from the copy that updates it.
  void sync_to_host() {
    for (int c = 0; c < int(copies_.size()); ++c) {
      WeightCopy& copy = copies_[std::size_t(c)];
      cuda::DeviceScope const on(copy.params.device());
      cudaStream_t const stream = copy.stream.get();
      comm::Slice const part = copies_.size() > 1 ? sync_->slice(c) : comm::Slice{0, host_.size()};
      if (c == 0) cuda::copy_to_host(host_.data(), copy.params.data(), host_.size(), stream);
      std::size_t i = 0;
      state_.for_each_slot([&](char const*, AlignedBuffer& host) {
        auto const& slot = copy.slots[i++];
        cuda::copy_to_host(host.data() + part.begin, slot.data() + part.begin, part.end - part.begin, stream);
      });
      copy.stream.synchronize();
    }
  }

  [[nodiscard]] Opt const& optimizer() const { return optimizer_; }
  [[nodiscard]] typename Opt::State& state() { return state_; }
  [[nodiscard]] typename Opt::State const& state() const { return state_; }

 private:
  struct WeightCopy {
    cuda::DeviceBuffer<float> params;              // padded to the sync's equal chunks
    std::vector<cuda::DeviceBuffer<float>> slots;  // the optimizer's slots, arena-sized
    cuda::Stream stream;                           // for the copies to and from the host
  };
  // A layer-wise optimizer's scratch per replica: each block's shares of a piece's norms,
  // each piece's two sums, their read-back, and the replica's shares per tensor.
  struct LayerwiseScratch {
    cuda::DeviceBuffer<double> partials;  // 2 * sum_blocks
    cuda::DeviceBuffer<double> sums;      // ||w||^2 and ||u||^2 of each piece
    cuda::PinnedBuffer<double> readback;
    std::vector<optim::NormShares> tensors;
  };

  WeightCopy& copy_of(int r) { return copies_[std::size_t(sync_->copy_of(r))]; }

  // The optimizer's element rule on one piece.
  void apply(cuda::Context& c, int r, Piece const& piece, std::int64_t step) {
    WeightCopy& copy = copy_of(r);
    std::array<float*, optim::max_rule_slots> slots{};
    for (std::size_t i = 0; i < copy.slots.size(); ++i) slots[i] = copy.slots[i].data() + piece.begin;
    optim::launch_rule(c, optimizer_.rule({step, 1.0f, piece.decay}), copy.params.data() + piece.begin,
                       sync_->reduced_at(r, piece.begin), slots, int(copy.slots.size()), piece.end - piece.begin);
  }

  // A layer-wise optimizer: each piece's moments and its shares of ||w||^2 and ||u||^2 on
  // the device, one read back; after a barrier, each tensor's shares added over the replicas
  // in replica order (one answer everywhere), then the update with its trust ratio.
  void apply_layerwise(cuda::Context& c, int r, std::int64_t step) {
    auto const& pieces = pieces_[std::size_t(r)];
    LayerwiseScratch& s = layerwise_[std::size_t(r)];
    WeightCopy& copy = copy_of(r);
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      Piece const& piece = pieces[p];
      optim::launch_layerwise_moments(c, optimizer_.rule({step, 1.0f, piece.decay}), copy.params.data() + piece.begin,
                                      sync_->reduced_at(r, piece.begin), copy.slots[0].data() + piece.begin,
                                      copy.slots[1].data() + piece.begin, piece.end - piece.begin, s.partials.data());
      double const* partials = s.partials.data();
      c.launch_blocks(cuda::Kernel::sum_doubles, 1, partials, cuda::sum_blocks, s.sums.data() + 2 * p);
      c.launch_blocks(cuda::Kernel::sum_doubles, 1, partials + cuda::sum_blocks, cuda::sum_blocks, s.sums.data() + 2 * p + 1);
    }
    cuda::copy_to_host(s.readback.data(), s.sums.data(), 2 * pieces.size(), c.stream());
    c.synchronize();
    std::fill(s.tensors.begin(), s.tensors.end(), optim::NormShares{});
    for (std::size_t p = 0; p < pieces.size(); ++p)
      s.tensors[pieces[p].tensor] += {s.readback.data()[2 * p], s.readback.data()[2 * p + 1]};
    sync_->barrier(r);
    for (Piece const& piece : pieces) {
      optim::NormShares tensor;
      for (auto const& replica : layerwise_) tensor += replica.tensors[piece.tensor];  // replica order
      optim::StepInfo const info{step, 1.0f, piece.decay};
      optim::launch_layerwise_apply(c, optimizer_.rule(info), copy.params.data() + piece.begin,
                                    copy.slots[0].data() + piece.begin, copy.slots[1].data() + piece.begin,
                                    piece.end - piece.begin, optimizer_.step_rate(info, Opt::trust_ratio(tensor)));
    }
  }

  Opt optimizer_;
  typename Opt::State state_;  // the host copy (checkpoints); the device copies are in copies_
  std::span<float> host_;      // the model's weights
  Sync* sync_;
  bool whole_gradient_first_;
  std::vector<WeightCopy> copies_;
  std::array<std::vector<Piece>, Replicas> pieces_;
  std::array<std::int64_t, Replicas> slice_floats_{};
  std::array<LayerwiseScratch, Replicas> layerwise_;
};

}  // namespace strata::train
