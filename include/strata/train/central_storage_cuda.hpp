#pragma once
// CentralStorage<N> on Cuda: the GPUs compute, the host holds the variables. Included by
// strata/cuda.hpp. Its two parts of a step (train/step_runner.hpp):
//
//   HostCentralSync<N>     each replica's gradient arena is in the memory of its GPU; after
//                          the group's last backward it is copied into page-locked host
//                          memory, and the owner of a slice sums it over the replicas there,
//                          in replica order (the CPU step's arithmetic: its summands() are
//                          the host copies)
//   HostCentralUpdate      the one copy of the weights and the optimizer state in page-locked
//                          host memory, updated by the CPU's SliceUpdate (any optimizer, no
//                          element rule needed); each replica then sends the slice it updated
//                          to every GPU's copy of the weights, which the forward passes read
//
// Where the replicas run is Mirrored<N>'s choice (cuda::replica_devices): one GPU per
// replica when the process sees N of them, else N logical replicas on one. Against
// Mirrored<N> on Cuda the trade is TensorFlow's: no optimizer state on any GPU (it may be as
// large as the weights twice over) and no collective between GPUs, for a copy of the
// gradients to the host and of the weights back on every step.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "strata/comm/thread_group.hpp"
#include "strata/cuda/context.hpp"
#include "strata/cuda/device_replica.hpp"
#include "strata/cuda/runtime.hpp"
#include "strata/nn/layer.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/policy/communication.hpp"
#include "strata/policy/device.hpp"
#include "strata/train/gradient_sync.hpp"
#include "strata/train/replica_pass_cuda.hpp"
#include "strata/train/slice_update.hpp"

namespace strata::train {

template <optim::Optimizer Opt, int Replicas>
class HostCentralUpdate;

template <int Replicas>
class HostCentralSync : public ReplicaBarrier<Replicas> {
 public:
  // The update this sync's step runs (StepRunner takes it from here): on the host, in fp32
  // (the device's GEMMs round their factors under MixedPrecision, as Mirrored's do).
  template <class Opt, class /*compute type*/>
  using update_type = HostCentralUpdate<Opt, Replicas>;

  HostCentralSync(comm::ThreadGroup& group, std::span<float> model_gradients, std::span<std::size_t const> /*offsets*/)
      : ReplicaBarrier<Replicas>(group), arena_(model_gradients.size()), devices_(cuda::replica_devices(Replicas)) {
    for (int r = 0; r < Replicas; ++r) {
      gradients_.emplace_back(arena_, devices_[std::size_t(r)], true);
      host_.emplace_back(arena_);
      peers_[std::size_t(r)] = host_.back().data();
    }
  }

  [[nodiscard]] float* gradients(int r) { return gradients_[std::size_t(r)].data(); }
  void begin_reduction(bool) {}
  void layer_done(int, std::size_t) {}
  // After the group's last backward: every replica's arena is in host memory.
  void gradients_ready(int r) {
    cuda::Context& c = cuda::current_context();
    cuda::copy_to_host(host_[std::size_t(r)].data(), gradients_[std::size_t(r)].data(), arena_, c.stream());
    c.synchronize();
    this->barrier(r);
  }
  [[nodiscard]] std::span<float const* const> summands(int) const { return peers_; }

  [[nodiscard]] comm::Slice slice(int r) const { return comm::owned_slice(arena_, Replicas, r); }
  [[nodiscard]] int device_of(int r) const { return devices_[std::size_t(r)]; }
  [[nodiscard]] std::vector<int> const& devices() const { return devices_; }
  [[nodiscard]] static constexpr int num_replicas_in_sync() { return Replicas; }

 private:
  std::size_t arena_;
  std::vector<int> devices_;
  std::vector<cuda::DeviceBuffer<float>> gradients_;  // what backward writes, on each replica's GPU
  std::vector<cuda::PinnedBuffer<float>> host_;       // their copies in host memory
  std::array<float const*, Replicas> peers_{};
};

template <optim::Optimizer Opt, int Replicas>
class HostCentralUpdate {
  using Sync = HostCentralSync<Replicas>;

 public:
  HostCentralUpdate(Opt const& optimizer, std::vector<nn::ParameterTensor> const& tensors, std::span<float> weights,
                    Sync& sync, bool whole_gradient_first)
      : model_(weights), central_(weights.size()),
        host_(optimizer, tensors, std::span<float>(central_.data(), central_.size()), sync, whole_gradient_first),
        devices_(std::span<float const>(central_.data(), central_.size()), Replicas) {
    resume();
  }

  // Replica r's update of its slice of the central weights, then that slice sent to every
  // GPU's copy. Returns when every replica's is there: the next forward may read them.
  template <class Decide>
  std::int64_t run(int r, Sync& sync, float scale, std::int64_t step, Decide&& decide) {
    std::int64_t const reduced = host_.run(r, sync, scale, step, decide);
    comm::Slice const mine = sync.slice(r);
    if (mine.end > mine.begin) devices_.refresh(mine.begin, mine.end);
    sync.barrier(r);
    return reduced;
  }

  [[nodiscard]] float const* forward_weights(int r) const { return devices_(r); }

  // After the model's weights or the optimizer state were restored (or as the model came).
  void resume() {
    std::copy(model_.begin(), model_.end(), central_.data());
    host_.resume();
    devices_.refresh(0, central_.size());
  }
  // The model's weights from the central copy; the state is the host's already.
  void sync_to_host() { std::copy(central_.data(), central_.data() + central_.size(), model_.data()); }

  [[nodiscard]] Opt const& optimizer() const { return host_.optimizer(); }
  [[nodiscard]] typename Opt::State& state() { return host_.state(); }
  [[nodiscard]] typename Opt::State const& state() const { return host_.state(); }

 private:
  std::span<float> model_;                         // the model's weights: checkpoints and callbacks read them
  cuda::PinnedBuffer<float> central_;              // the variables, page-locked: uploads at full bus speed
  SliceUpdate<Opt, policy::Cpu, Replicas, float> host_;  // updates central_ in place
  ReplicaWeights<policy::Cuda, float> devices_;    // what the forward passes read, on each GPU
};

template <CentralStorageStrategy Strategy, class Bucket, class Compression>
struct GradientSync<Strategy, policy::Cuda, Bucket, Compression> {
  static_assert(Bucket::bytes == policy::default_bucket_bytes,
                "strata::BucketBytes<B> has no effect on CentralStorage<N> on strata::Cuda: each replica's "
                "gradients come to the host in one copy per step, with no buckets to size; drop BucketBytes<B>");
  static_assert(std::is_same_v<Compression, policy::NoCompression>,
                "strata::Compress<T> is not built on strata::Cuda yet: gradients cross GPUs in fp32; drop Compress<T>");
  using type = HostCentralSync<Strategy::replicas>;
};

}  // namespace strata::train
