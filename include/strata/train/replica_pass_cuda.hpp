#pragma once
// ReplicaPass and ReplicaWeights on the Cuda device (train/replica_pass.hpp says what they
// do). Included by strata/cuda.hpp.
//
// Each replica has its own host thread, Context (stream, cuBLAS) and copy stream
// (cuda::DeviceReplica). A pass uploads its shard through pinned memory on the copy stream
// — the shard the previous call staged, when it did — so one replica's upload overlaps
// another's compute; after backward is enqueued it stages the next call's shard, and only
// then waits for the loss and accuracy sums (one wait per pass). Activations stay in float
// in device memory: under MixedPrecision the GEMMs round their factors to 16 bits on tensor
// cores (the Context's GemmPrecision), so the weights need no rounded copy.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "strata/cuda/backend.hpp"
#include "strata/cuda/context.hpp"
#include "strata/cuda/device_replica.hpp"
#include "strata/cuda/runtime.hpp"
#include "strata/nn/layer.hpp"
#include "strata/policy/device.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/train/replica_pass.hpp"

namespace strata::train {

template <class Model, class T>
class ReplicaPass<Model, policy::Cuda, T> {
 public:
  using backend = CudaBackend;
  using Workspace = typename Model::template Workspace<CudaBackend, float>;
  static constexpr bool copies_ahead = true;

  ReplicaPass(int max_shard, int device)
      : replica_(std::make_unique<cuda::DeviceReplica>(device, cuda::gemm_precision_for<T>, max_shard,
                                                       Model::input_width, target_width())),
        max_shard_(max_shard) {
    reserve();
    cuda::ContextBinding const bind(replica_->context);
    workspace_ = std::make_unique<Workspace>(max_shard);  // in this replica's device memory
  }

  // Bytes in use on this replica's GPU (profile/memory.hpp).
  [[nodiscard]] std::size_t device_memory_used() const { return cuda::memory_used(replica_->context.device()); }

  // Binds this replica's context to the calling thread for the duration of its task.
  [[nodiscard]] cuda::ContextBinding bind() { return cuda::ContextBinding(replica_->context); }

  template <class LossFn, class LayerDone, class ForwardDone>
  Tally train(Model const& model, float const* params, LossFn const& loss, strategy::Shard const& shard, bool staged,
              strategy::Shard const* next, nn::ForwardContext const& context, float loss_scale, float* gradients,
              bool accumulate, LayerDone&& layer_done, ForwardDone&& forward_done) {
    strategy::Shard const on_device = staged ? replica_->take() : replica_->upload(shard);
    CudaBackend::defer_sums();  // the sums are read once, after backward and the next upload are enqueued
    Tally tally = forward_shard<CudaBackend>(model, *workspace_, params, loss, on_device, context, loss_scale);
    forward_done();
    model.template backward<CudaBackend>(*workspace_, params, gradients, on_device.features, accumulate, layer_done);
    return finish(tally, next);
  }

  template <class LossFn>
  Tally evaluate(Model const& model, float const* params, LossFn const& loss, strategy::Shard const& shard, bool staged,
                 strategy::Shard const* next) {
    strategy::Shard const on_device = staged ? replica_->take() : replica_->upload(shard);
    CudaBackend::defer_sums();
    Tally const tally = forward_shard<CudaBackend>(model, *workspace_, params, loss, on_device, {.backward_follows = false});
    return finish(tally, next);
  }

  void predict(Model const& model, float const* params, strategy::Shard const& shard, bool staged,
               strategy::Shard const* next, float* out) {
    strategy::Shard const on_device = staged ? replica_->take() : replica_->upload(shard);
    model.template forward<CudaBackend>(*workspace_, params, on_device.features, {.backward_follows = false});
    replica_->release();
    if (next) replica_->stage(*next);
    auto& c = replica_->context;  // into pageable memory: a waiting copy
    cuda::copy_to_host(out, workspace_->output().data, workspace_->output().size(), c.stream());
    c.synchronize();
  }

  [[nodiscard]] Workspace& workspace() { return *workspace_; }
  [[nodiscard]] cuda::Context& context() { return replica_->context; }
  // TF32 (or back to fp32) for a FullPrecision run's GEMMs.
  void set_gemm_precision(cuda::GemmPrecision p) {
    replica_->context.set_precision(p);
    reserve();
  }

 private:
  // Rows of a shard's targets: class indices take one, regression targets the output's width.
  static int target_width() { return std::max(1, Model::output_width); }

  // The 16-bit GEMM scratch, sized by the largest factor a shard meets: a layer's weights
  // (at most the arena) or an activation (inside a Residual block too). No step allocates.
  void reserve() {
    std::size_t const largest =
        std::max(Model::arena_size, Model::largest_activation_per_sample * std::size_t(std::max(max_shard_, 1)));
    replica_->context.reserve(largest, max_shard_);
  }

  // After the pass is enqueued: the next shard staged, then one wait for the sums (which
  // throws the CPU's message for a bad label).
  Tally finish(Tally tally, strategy::Shard const* next) {
    replica_->release();
    if (next) replica_->stage(*next);
    auto const sums = CudaBackend::collect_sums();
    tally.loss_sum = sums.loss;
    tally.correct = sums.correct;
    return tally;
  }

  std::unique_ptr<cuda::DeviceReplica> replica_;
  std::unique_ptr<Workspace> workspace_;
  int max_shard_;
};

// On Cuda: the host weights uploaded to each GPU the replicas run on (one copy for logical
// replicas on one GPU).
template <class T>
class ReplicaWeights<policy::Cuda, T> {
 public:
  // (The parameter tensors matter only to the CPU's form.)
  ReplicaWeights(std::span<float const> host, int replicas, std::span<nn::ParameterTensor const> = {})
      : host_(host), devices_(cuda::replica_devices(replicas)) {
    multi_ = devices_.back() != devices_.front();
    for (std::size_t r = 0; r < (multi_ ? devices_.size() : 1); ++r) {
      copies_.emplace_back(host.size(), devices_[r]);
      streams_.emplace_back(devices_[r]);
    }
  }

  // Sends the host weights [begin, end) to every copy.
  void refresh(std::size_t begin, std::size_t end) {
    for (std::size_t c = 0; c < copies_.size(); ++c) {
      cuda::DeviceScope const on(devices_[multi_ ? c : 0]);
      cuda::copy_to_device(copies_[c].data() + begin, host_.data() + begin, end - begin, streams_[c].get());
      streams_[c].synchronize();
    }
  }
  [[nodiscard]] float const* operator()(int replica) const { return copies_[multi_ ? std::size_t(replica) : 0].data(); }
  [[nodiscard]] int device_of(int replica) const { return devices_[std::size_t(replica)]; }

 private:
  std::span<float const> host_;
  std::vector<int> devices_;
  bool multi_ = false;
  std::vector<cuda::DeviceBuffer<float>> copies_;
  std::vector<cuda::Stream> streams_;  // one per copy, for the uploads
};

}  // namespace strata::train
