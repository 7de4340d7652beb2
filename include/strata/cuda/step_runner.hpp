#pragma once
// The training step and evaluation on the Cuda device: what train::StepRunner and
// train::Evaluator do on the CPU, with the weights, gradients, optimizer state and
// activations in device memory.
//
// Replicas, one host thread and one stream each. Each uploads its shard through pinned memory
// on its own copy stream (so one replica's upload overlaps another's compute), runs forward
// and backward into its own gradient arena, then updates its owned slice of the weights.
// Where they run (replica_devices):
// - N logical replicas on device 0 (TensorFlow's logical devices), when the process sees
//   fewer than N GPUs: one shared copy of the weights; after the barrier each replica adds
//   its slice of every replica's gradients in replica order (the CPU step's arithmetic).
// - One GPU per replica, when the process sees at least N (and NCCL is linked): a copy of
//   the weights per GPU; NCCL reduce-scatters the gradients so each replica holds the sum of
//   its slice, each updates its slice, and NCCL all-gathers the weights.
//
// Precision: FullPrecision multiplies in fp32 (set_gemm_precision(tf32) opts into TF32);
// MixedPrecision (bf16) and MixedPrecisionFp16 run every GEMM on tensor cores with both
// factors rounded to 16 bits and float accumulation. Activations stay in float, and the
// fp16 loss scale works as on the CPU.
//
// The host copies of the weights and optimizer state (what checkpoints read) are brought up
// to date by sync_to_host(); resume() sends them to the device.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "strata/comm/buckets.hpp"
#ifndef STRATA_CUDA_NCCL  // strata::cuda defines it 0 where CMake found no libnccl
#if __has_include(<nccl.h>)
#define STRATA_CUDA_NCCL 1
#else
#define STRATA_CUDA_NCCL 0
#endif
#endif
#if STRATA_CUDA_NCCL
#include "strata/comm/nccl_communicator.hpp"
#endif
#include "strata/comm/thread_group.hpp"
#include "strata/core/random.hpp"
#include "strata/cuda/backend.hpp"
// The device math of the layers that were the backend's own; a newer layer's comes with strata/cuda.hpp.
#include "strata/nn/activation_cuda.hpp"
#include "strata/nn/dropout_cuda.hpp"
#include "strata/nn/loss_cuda.hpp"
#include "strata/data/batch.hpp"
#include "strata/nn/loss.hpp"
#include "strata/optim/element_rule.hpp"
#include "strata/optim/element_rule_cuda.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/loss_scale.hpp"
#include "strata/train/replica_pass.hpp"
#include "strata/train/slice_update.hpp"
#include "strata/train/evaluator.hpp"
#include "strata/train/step_progress.hpp"
#include "strata/train/step_runner.hpp"
#include "strata/train/trainer.hpp"

namespace strata::cuda {

// Where replica r runs: one GPU per replica when the process sees enough GPUs and NCCL is
// linked (strata::cuda links it where CMake finds it), else every replica on device 0.
inline std::vector<int> replica_devices(int replicas) {
  std::vector<int> devices(std::size_t(replicas), 0);
#if STRATA_CUDA_NCCL
  if (replicas > 1 && device_count() >= replicas)
    for (int r = 0; r < replicas; ++r) devices[std::size_t(r)] = r;
#endif
  return devices;
}

template <class T>
inline constexpr GemmPrecision gemm_precision_for =
    std::is_same_v<T, bf16> ? GemmPrecision::bf16 : std::is_same_v<T, fp16> ? GemmPrecision::fp16 : GemmPrecision::fp32;

// An optimizer runs on the device through its element rule (optim/element_rule.hpp).
template <class Opt>
inline constexpr bool has_device_update = optim::ElementwiseOptimizer<Opt> || optim::LayerwiseRuleOptimizer<Opt>;

// One replica's device resources: its context, its copy stream, and two upload slots, so
// that the next batch's shard is copied while this one's is trained on.
class DeviceReplica {
 public:
  DeviceReplica(int device, GemmPrecision precision, int max_shard, int input_width, int target_width)
      : context(device, precision), copy_stream(device) {
    for (Slot& s : slots_) {
      s.features = DeviceBuffer<float>(std::size_t(max_shard) * std::size_t(input_width), device);
      s.targets = DeviceBuffer<float>(std::size_t(max_shard) * std::size_t(target_width), device);
      s.staging = PinnedBuffer<float>(std::size_t(max_shard) * std::size_t(input_width + target_width));
      s.uploaded = Event(device);
      s.consumed = Event(device);
    }
  }

  // Starts copying `shard` into the other slot: through pinned memory, on the copy stream,
  // once the compute that last read that slot is done. take() hands it out.
  void stage(strategy::Shard const& shard) {
    Slot& s = slots_[next_];
    next_ ^= 1;
    std::size_t const nf = shard.features.size(), nt = shard.targets.size();
    s.uploaded.synchronize();  // the slot's previous copy has left its staging buffer
    if (nf) std::copy_n(shard.features.data, nf, s.staging.data());
    if (nt) std::copy_n(shard.targets.data, nt, s.staging.data() + nf);
    s.consumed.make_wait(copy_stream.get());
    copy_to_device(s.features.data(), s.staging.data(), nf, copy_stream.get());
    copy_to_device(s.targets.data(), s.staging.data() + nf, nt, copy_stream.get());
    s.uploaded.record(copy_stream.get());
    s.shard = shard;
    s.shard.features = {s.features.data(), shard.features.rows, shard.features.cols};
    s.shard.targets = {s.targets.data(), shard.targets.rows, shard.targets.cols};
  }
  // The last staged shard, with device views; the context's stream waits for its copy.
  strategy::Shard take() {
    Slot& s = slots_[next_ ^ 1];
    s.uploaded.make_wait(context.stream());
    return s.shard;
  }
  // After the context's stream has enqueued the last work that reads the taken shard.
  void release() { slots_[next_ ^ 1].consumed.record(context.stream()); }
  // stage() then take(): the shard copied now.
  strategy::Shard upload(strategy::Shard const& shard) {
    stage(shard);
    return take();
  }

  Context context;
  Stream copy_stream;

 private:
  struct Slot {
    DeviceBuffer<float> features, targets;
    PinnedBuffer<float> staging;
    Event uploaded, consumed;
    strategy::Shard shard{};
  };
  std::array<Slot, 2> slots_;
  int next_ = 0;  // the slot stage() fills next
};

// Floats of the largest GEMM factor a shard of `shard` samples meets: a layer's weights
// (at most the arena) or an activation (inside a Residual block too). The 16-bit GEMM
// scratch is sized by it.
template <class Model>
std::size_t largest_gemm_factor(int shard) {
  return std::max(Model::arena_size, Model::largest_activation_per_sample * std::size_t(std::max(shard, 1)));
}

// One replica per device of `devices`, its scratch reserved so that no step allocates.
template <class Model>
std::vector<std::unique_ptr<DeviceReplica>> make_replicas(std::vector<int> const& devices, GemmPrecision precision,
                                                          int max_shard, int target_width) {
  std::vector<std::unique_ptr<DeviceReplica>> replicas;
  for (int device : devices) {
    replicas.push_back(std::make_unique<DeviceReplica>(device, precision, max_shard, Model::input_width, target_width));
    replicas.back()->context.reserve(largest_gemm_factor<Model>(max_shard), max_shard);
  }
  return replicas;
}

template <class Config, class Model, optim::Optimizer Opt, nn::Loss LossFn>
class StepRunner : public train::StepProgress<Config> {
  static_assert(has_device_update<Opt>,
                "strata::Cuda: this optimizer has no element rule, so it runs on strata::Cpu only; give it one "
                "with STRATA_ELEMENT_RULE and a rule(StepInfo) member, and the GPU runs the CPU's arithmetic "
                "(docs/gpu.md)");
  static constexpr bool layerwise = optim::LayerwiseRuleOptimizer<Opt>;

 public:
  using backend = CudaBackend;
  using compute_type = typename Config::precision::compute_type;
  using Workspace = typename Model::template Workspace<CudaBackend, float>;
  static constexpr int num_replicas = Config::num_replicas;
  static constexpr std::size_t arena = Model::arena_size;

  StepRunner(strategy::BasicStrategy<Config>& strategy, Model& model, Opt const& optimizer, LossFn const& loss,
             int global_batch_size, std::uint64_t seed, train::StepOptions options = {})
      : train::StepProgress<Config>(global_batch_size, seed, options), group_(&strategy.group()), model_(&model),
        optimizer_(optimizer), loss_(loss), state_(optimizer.make_state(arena)) {
    optimizer_.validate();
    strategy::check_global_batch(global_batch_size, num_replicas);
    int const shard = strategy::max_shard_size(global_batch_size, num_replicas);
    devices_ = replica_devices(num_replicas);
    multi_ = devices_.back() != devices_.front();
    chunk_ = multi_ ? (arena + num_replicas - 1) / num_replicas : arena;
    padded_ = multi_ ? chunk_ * num_replicas : arena;
    replicas_ = make_replicas<Model>(devices_, gemm_precision_for<compute_type>, shard, target_width());
    for (int r = 0; r < (multi_ ? num_replicas : 1); ++r) {  // the weights: one copy per GPU
      int const device = devices_[std::size_t(r)];
      copies_.emplace_back();
      copies_.back().params = DeviceBuffer<float>(padded_, device, true);
      state_.for_each_slot([&](char const*, AlignedBuffer&) { copies_.back().slots.emplace_back(arena, device, true); });
      reduced_.emplace_back(multi_ ? chunk_ : arena, device, true);
    }
#if STRATA_CUDA_NCCL
    if (multi_) comms_ = comm::NcclCommunicator::create_all(devices_);
#endif
    workspaces_.reserve(num_replicas);
    for (int r = 0; r < num_replicas; ++r) {
      ContextBinding const bind(replicas_[std::size_t(r)]->context);
      gradients_[std::size_t(r)] = DeviceBuffer<float>(padded_, devices_[std::size_t(r)], true);
      workspaces_.emplace_back(shard);
    }
    plan_pieces();
    upload_state();
  }

  // One micro-batch. `next`, where given, is the batch of the next call (unchanged until
  // then): its shards are copied to the device while this batch's backward pass runs, and the
  // next call starts computing at once. The Trainer passes it.
  train::Tally train_on_batch(data::Batch const& batch, data::Batch const* next = nullptr) {
    auto const micro = this->begin_micro_batch(batch.size);
    strategy::DistributedBatch const distributed(batch, num_replicas);
    bool const staged = staged_ == key_of(&batch);
    staged_ = key_of(next);
    auto task = [&](int r) {
      auto& replica = *replicas_[std::size_t(r)];
      ContextBinding const bind(replica.context);
      strategy::Shard const shard = staged ? replica.take() : replica.upload(distributed.shard(r));
      auto& ws = workspaces_[std::size_t(r)];
      float const* params = copy_of(r).params.data();
      CudaBackend::defer_sums();  // the loss is read once, after backward and the next upload are enqueued
      auto& tally = tallies_[std::size_t(r)];
      tally = train::forward_shard<CudaBackend>(*model_, ws, params, loss_, shard,
                                                {true, micro.dropout_seed, shard.first_sample}, micro.loss_scale);
      model_->template backward<CudaBackend>(ws, params, gradients_[std::size_t(r)].data(), shard.features,
                                             micro.accumulate);
      replica.release();
      if (next) replica.stage(strategy::DistributedBatch(*next, num_replicas).shard(r));
      auto const sums = CudaBackend::collect_sums();  // waits for backward; throws for a bad label
      tally.loss_sum = sums.loss;
      tally.correct = sums.correct;
      if (micro.apply) {
        group_->barrier(r);  // every replica's gradients are complete
        update_owned_slice(r);
        replica.context.synchronize();  // the weights are updated before anyone's next forward
      }
    };
    try {
      group_->run(task);
    } catch (...) {
      staged_ = {};  // a failed step leaves nothing staged
      throw;
    }
    this->end_micro_batch(micro.apply);
    train::Tally total;
    for (auto const& t : tallies_) total += t;
    return total;
  }

  void flush() {
    if (!this->group_pending()) return;
    auto task = [&](int r) {
      ContextBinding const bind(replicas_[std::size_t(r)]->context);
      replicas_[std::size_t(r)]->context.synchronize();
      group_->barrier(r);
      update_owned_slice(r);
      replicas_[std::size_t(r)]->context.synchronize();
    };
    group_->run(task);
    this->finish_step();
  }

  // Continues from the host weights and optimizer state (restored from a checkpoint, or as
  // the model was given), sending them to the device.
  void resume(std::int64_t steps, std::int64_t micro_batches, std::optional<train::LossScaleState> loss_scale = {}) {
    this->restart(steps, micro_batches, loss_scale);
    upload_state();
  }

  // Copies the device weights and optimizer state into the model and the host state.
  // Across GPUs every copy of the weights is whole (after the all-gather), while each GPU's
  // optimizer state is current only on its own slice.
  void sync_to_host() {
    for (int r = 0; r < int(copies_.size()); ++r) {
      auto& c = replicas_[std::size_t(r)]->context;
      ContextBinding const bind(c);
      comm::Slice const part = multi_ ? slice(r) : comm::Slice{0, arena};
      if (r == 0) copy_to_host(model_->parameters().data(), copies_[0].params.data(), arena, c.stream());
      std::size_t i = 0;
      state_.for_each_slot([&](char const*, AlignedBuffer& host) {
        auto const& slot = copies_[std::size_t(r)].slots[i++];
        copy_to_host(host.data() + part.begin, slot.data() + part.begin, part.end - part.begin, c.stream());
      });
      c.synchronize();
    }
  }

  // TF32 (or back to fp32) for a FullPrecision run's GEMMs.
  void set_gemm_precision(GemmPrecision p) {
    for (auto& r : replicas_) r->context.set_precision(p);
    int const shard = workspaces_[0].max_batch();
    for (auto& r : replicas_) r->context.reserve(largest_gemm_factor<Model>(shard), shard);
  }

  [[nodiscard]] std::int64_t floats_reduced() const { return floats_reduced_; }
  [[nodiscard]] Opt const& optimizer() const { return optimizer_; }
  [[nodiscard]] typename Opt::State& optimizer_state() { return state_; }
  [[nodiscard]] typename Opt::State const& optimizer_state() const { return state_; }
  [[nodiscard]] Context& context(int replica) { return replicas_[std::size_t(replica)]->context; }
  // The device of each replica, and whether they span several GPUs (over NCCL).
  [[nodiscard]] std::vector<int> const& devices() const { return devices_; }
  [[nodiscard]] bool across_gpus() const { return multi_; }

 private:
  using Piece = train::Piece;
  // Lamb's per-replica scratch: each block's shares of a piece's norms, each piece's two sums.
  struct LayerwiseScratch {
    DeviceBuffer<double> partials;  // 2 * sum_blocks
    DeviceBuffer<double> sums;      // ||w||^2 and ||u||^2 of each piece
    PinnedBuffer<double> readback;
    std::vector<optim::NormShares> tensors;  // this replica's shares of each tensor's norms
  };
  // The weights and optimizer state as one GPU holds them.
  struct WeightCopy {
    DeviceBuffer<float> params;              // the arena, padded to num_replicas equal chunks across GPUs
    std::vector<DeviceBuffer<float>> slots;  // the optimizer's slots, arena-sized
  };
  WeightCopy& copy_of(int r) { return copies_[multi_ ? std::size_t(r) : 0]; }
  // Replica r's slice of the arena: equal chunks across GPUs (what NCCL's reduce-scatter
  // hands out), comm::owned_slice on one GPU.
  [[nodiscard]] comm::Slice slice(int r) const {
    if (!multi_) return comm::owned_slice(arena, num_replicas, r);
    return {std::min(arena, std::size_t(r) * chunk_), std::min(arena, std::size_t(r + 1) * chunk_)};
  }
  // Where the reduced gradient of arena element `index` (in replica r's slice) is.
  float* reduced_at(int r, std::size_t index) {
    return multi_ ? reduced_[std::size_t(r)].data() + (index - slice(r).begin) : reduced_[0].data() + index;
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

  // Rows of a shard's targets: class indices take one, regression targets the output's width.
  static int target_width() { return std::max(1, Model::output_width); }

  void plan_pieces() {
    auto const tensors = Model::parameter_tensors();
    for (int r = 0; r < num_replicas; ++r) {
      pieces_[std::size_t(r)] = train::plan_pieces(tensors, slice(r), optimizer_);
      if constexpr (layerwise) {
        std::size_t const n = pieces_[std::size_t(r)].size();
        LayerwiseScratch& s = layerwise_[std::size_t(r)];
        int const device = devices_[std::size_t(r)];
        s.partials = DeviceBuffer<double>(2 * std::size_t(sum_blocks), device);
        s.sums = DeviceBuffer<double>(std::max<std::size_t>(1, 2 * n), device);
        s.readback = PinnedBuffer<double>(std::max<std::size_t>(1, 2 * n));
        s.tensors.resize(tensors.size());
      }
    }
  }

  void upload_state() {
    for (int r = 0; r < int(copies_.size()); ++r) {
      auto& c = replicas_[std::size_t(r)]->context;
      ContextBinding const bind(c);
      copy_to_device(copies_[std::size_t(r)].params.data(), model_->parameters().data(), arena, c.stream());
      std::size_t i = 0;
      state_.for_each_slot([&](char const*, AlignedBuffer& host) {
        copy_to_device(copies_[std::size_t(r)].slots[i++].data(), host.data(), arena, c.stream());
      });
      c.synchronize();
    }
  }

  void update_owned_slice(int r) {
    Context& c = replicas_[std::size_t(r)]->context;
    float const scale = this->gradient_scale();
    comm::Slice const mine = slice(r);
    std::int64_t const n = std::int64_t(mine.end - mine.begin);
    float* const reduced = reduced_at(r, mine.begin);
    reduce_slice(r, c, mine, scale, reduced);
    if (r == 0) floats_reduced_ += std::int64_t(arena);
    if (this->needs_global_norm()) {
      shares_[std::size_t(r)] = n > 0 ? c.sum_of_squares(reduced, std::size_t(n)) : 0.0;
      group_->barrier(r);
      double total = 0.0;
      for (double s : shares_) total += s;  // replica order: one answer everywhere
      auto const decision = this->decide(total, r);
      if (!decision.apply) return;  // skipped on every replica alike
      if (decision.factor != 1.0f && n > 0) c.launch(Kernel::scale, n, reduced, (long long)n, decision.factor);
    }
    if constexpr (layerwise) apply_layerwise(c, r);
    else
      for (Piece const& piece : pieces_[std::size_t(r)]) apply(c, r, piece);
#if STRATA_CUDA_NCCL
    if (multi_) {  // every GPU's copy gets every slice
      c.synchronize();
      float* params = copies_[std::size_t(r)].params.data();
      comms_[std::size_t(r)].all_gather(std::span<float const>(params + std::size_t(r) * chunk_, chunk_),
                                        std::span<float>(params, padded_));
    }
#endif
  }

  // reduced (reduced_at(r, mine.begin)) = scale * the sum over replicas of their gradients' slice.
  void reduce_slice(int r, Context& c, comm::Slice mine, float scale, float* reduced) {
    std::int64_t const n = std::int64_t(mine.end - mine.begin);
#if STRATA_CUDA_NCCL
    if (multi_) {  // NCCL sums (in its own order) into this replica's chunk; then the scale
      comms_[std::size_t(r)].reduce_scatter(std::span<float const>(gradients_[std::size_t(r)].data(), padded_),
                                            std::span<float>(reduced, chunk_), comm::ReduceOp::sum);
      if (n > 0) c.launch(Kernel::scale, n, reduced, (long long)n, scale);
      return;
    }
#endif
    if (n == 0) return;
    struct Peers {
      float const* p[max_peers];
    } peers{};
    static_assert(num_replicas <= max_peers, "strata::Cuda: at most 16 logical replicas per device");
    for (int p = 0; p < num_replicas; ++p) peers.p[p] = gradients_[std::size_t(p)].data() + mine.begin;
    c.launch(Kernel::reduce_replicas, n, peers, num_replicas, reduced, (long long)n, scale);
  }

  // The optimizer's element rule on one piece (optim/element_rule_cuda.hpp).
  void apply(Context& c, int r, Piece const& piece) {
    WeightCopy& copy = copy_of(r);
    std::array<float*, optim::max_rule_slots> slots{};
    for (std::size_t i = 0; i < copy.slots.size(); ++i) slots[i] = copy.slots[i].data() + piece.begin;
    optim::launch_rule(c, optimizer_.rule({this->step_ + 1, 1.0f, piece.decay}), copy.params.data() + piece.begin,
                       reduced_at(r, piece.begin), slots, int(copy.slots.size()), piece.end - piece.begin);
  }

  // A layer-wise optimizer (Lamb's two phases, optim/lamb.hpp): each piece's moments and its
  // shares of ||w||^2 and ||u||^2 on the device, one read back; after a barrier, each
  // tensor's shares added over the replicas in replica order (one answer everywhere), then
  // the update with its trust ratio.
  void apply_layerwise(Context& c, int r) {
    auto const& pieces = pieces_[std::size_t(r)];
    LayerwiseScratch& s = layerwise_[std::size_t(r)];
    WeightCopy& copy = copy_of(r);
    std::int64_t const t = this->step_ + 1;
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      Piece const& piece = pieces[p];
      optim::launch_layerwise_moments(c, optimizer_.rule({t, 1.0f, piece.decay}), copy.params.data() + piece.begin,
                                      reduced_at(r, piece.begin), copy.slots[0].data() + piece.begin,
                                      copy.slots[1].data() + piece.begin, piece.end - piece.begin, s.partials.data());
      double const* partials = s.partials.data();
      c.launch_blocks(Kernel::sum_doubles, 1, partials, sum_blocks, s.sums.data() + 2 * p);
      c.launch_blocks(Kernel::sum_doubles, 1, partials + sum_blocks, sum_blocks, s.sums.data() + 2 * p + 1);
    }
    copy_to_host(s.readback.data(), s.sums.data(), 2 * pieces.size(), c.stream());
    c.synchronize();
    std::fill(s.tensors.begin(), s.tensors.end(), optim::NormShares{});
    for (std::size_t p = 0; p < pieces.size(); ++p)
      s.tensors[pieces[p].tensor] += {s.readback.data()[2 * p], s.readback.data()[2 * p + 1]};
    group_->barrier(r);
    for (Piece const& piece : pieces) {
      optim::NormShares tensor;
      for (auto const& replica : layerwise_) tensor += replica.tensors[piece.tensor];
      optim::StepInfo const step{t, 1.0f, piece.decay};
      float const rate = optimizer_.step_rate(step, Opt::trust_ratio(tensor));
      optim::launch_layerwise_apply(c, optimizer_.rule(step), copy.params.data() + piece.begin,
                                    copy.slots[0].data() + piece.begin, copy.slots[1].data() + piece.begin,
                                    piece.end - piece.begin, rate);
    }
  }

  comm::ThreadGroup* group_;
  Model* model_;
  Opt optimizer_;
  LossFn loss_;
  typename Opt::State state_;  // the host copy (checkpoints); the device copies are in copies_

  std::vector<int> devices_;
  bool multi_ = false;  // one GPU per replica
  std::size_t chunk_ = 0, padded_ = 0;
  std::vector<std::unique_ptr<DeviceReplica>> replicas_;
  std::vector<Workspace> workspaces_;
  std::vector<WeightCopy> copies_;                // one, or one per GPU
  std::vector<DeviceBuffer<float>> reduced_;      // the reduced gradient: the arena, or each replica's chunk
#if STRATA_CUDA_NCCL
  std::vector<comm::NcclCommunicator> comms_;     // across GPUs
#endif
  std::array<DeviceBuffer<float>, num_replicas> gradients_;
  std::array<train::Tally, num_replicas> tallies_{};
  std::array<double, num_replicas> shares_{};
  std::array<std::vector<Piece>, num_replicas> pieces_;
  std::array<LayerwiseScratch, num_replicas> layerwise_;  // Lamb
  std::int64_t floats_reduced_ = 0;
  BatchKey staged_{};  // the batch whose shards the replicas staged for the next call
};

// Evaluation and prediction on the device, each replica on its shard of every batch. Sends
// the model's (host) weights to the device once per call.
template <class Config, class Model>
class Evaluator {
 public:
  static constexpr int num_replicas = Config::num_replicas;
  using Workspace = typename Model::template Workspace<CudaBackend, float>;

  Evaluator(strategy::BasicStrategy<Config>& strategy, Model const& model, int global_batch_size)
      : group_(&strategy.group()), model_(&model), batch_size_(global_batch_size) {
    strategy::check_global_batch(global_batch_size, num_replicas);
    int const shard = strategy::max_shard_size(global_batch_size, num_replicas);
    using T = typename Config::precision::compute_type;
    auto const devices = replica_devices(num_replicas);
    replicas_ = make_replicas<Model>(devices, gemm_precision_for<T>, shard, std::max(1, Model::output_width));
    multi_ = devices.back() != devices.front();
    for (int r = 0; r < (multi_ ? num_replicas : 1); ++r) params_.emplace_back(Model::arena_size, devices[std::size_t(r)]);
    for (int r = 0; r < num_replicas; ++r) {
      ContextBinding const bind(replicas_[std::size_t(r)]->context);
      workspaces_.emplace_back(shard);
    }
  }

  template <nn::Loss LossFn>
  train::Evaluation evaluate(LossFn const& loss, data::Dataset const& data) {
    std::array<train::Tally, num_replicas> tallies{};
    upload_weights();
    for_each_batch(
        data,
        [&](strategy::Shard const& shard, int r, Workspace& ws) {
          CudaBackend::defer_sums();  // forward_shard counts the samples; the sums come in finish
          tallies[std::size_t(r)] += train::forward_shard<CudaBackend>(*model_, ws, params(r), loss, shard, {});
        },
        [&](strategy::Shard const&, int r, Workspace&) {
          auto const sums = CudaBackend::collect_sums();  // throws for a bad label
          tallies[std::size_t(r)].loss_sum += sums.loss;
          tallies[std::size_t(r)].correct += sums.correct;
        });
    return train::summarize<LossFn>(tallies);
  }

  Matrix predict(data::Dataset const& data) {
    Matrix out(Model::output_width, Eigen::Index(data.size()));
    std::int64_t batch_start = 0;
    upload_weights();
    for_each_batch(
        data,
        [&](strategy::Shard const& shard, int r, Workspace& ws) {
          model_->template forward<CudaBackend>(ws, params(r), shard.features, {});
        },
        [&](strategy::Shard const& shard, int r, Workspace& ws) {  // into pageable memory: a waiting copy
          auto& c = replicas_[std::size_t(r)]->context;
          copy_to_host(out.data() + (batch_start + shard.first_sample) * Model::output_width, ws.output().data,
                       ws.output().size(), c.stream());
          c.synchronize();
        },
        &batch_start);
    return out;
  }

 private:
  float const* params(int r) const { return params_[multi_ ? std::size_t(r) : 0].data(); }

  void upload_weights() {
    for (std::size_t r = 0; r < params_.size(); ++r) {
      auto& c = replicas_[r]->context;
      ContextBinding const bind(c);
      copy_to_device(params_[r].data(), model_->parameters().data(), Model::arena_size, c.stream());
      c.synchronize();
    }
  }

  // Every replica, every batch of `data`: enqueue(shard, replica, workspace) puts the work on
  // the replica's stream; the replica then copies its shard of the next batch ahead (as the
  // training step does); finish(shard, replica, workspace) waits for the results.
  template <class Enqueue, class Finish>
  void for_each_batch(data::Dataset const& data, Enqueue&& enqueue, Finish&& finish,
                      std::int64_t* batch_start = nullptr) {
    Model::check_input_width(data.feature_width());
    std::array<bool, num_replicas> staged{};  // the replica's shard of this batch was copied ahead
    train::for_each_shard(
        *group_, data, batch_size_, num_replicas,
        [&](strategy::Shard const& shard, strategy::Shard const* next, int r) {
          auto& replica = *replicas_[std::size_t(r)];
          ContextBinding const bind(replica.context);
          Workspace& ws = workspaces_[std::size_t(r)];
          strategy::Shard const on_device = staged[std::size_t(r)] ? replica.take() : replica.upload(shard);
          enqueue(on_device, r, ws);
          replica.release();
          staged[std::size_t(r)] = next != nullptr;
          if (next) replica.stage(*next);
          finish(on_device, r, ws);
        },
        batch_start);
  }

  comm::ThreadGroup* group_;
  Model const* model_;
  int batch_size_;
  std::vector<std::unique_ptr<DeviceReplica>> replicas_;
  std::vector<Workspace> workspaces_;
  std::vector<DeviceBuffer<float>> params_;  // the weights: one copy, or one per GPU
  bool multi_ = false;
};

}  // namespace strata::cuda

namespace strata::train {
// Trainer<..., Cuda>: the device step and evaluator.
template <>
struct DeviceEngine<policy::Cuda> {
  template <class Config, class Model, class Opt, class LossFn>
  using step_runner = cuda::StepRunner<Config, Model, Opt, LossFn>;
  template <class Config, class Model>
  using evaluator = cuda::Evaluator<Config, Model>;
};
}  // namespace strata::train
