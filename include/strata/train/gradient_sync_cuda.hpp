#pragma once
// DeviceSync<N>: the GradientSync of OneDevice and Mirrored<N> on Cuda (train/gradient_sync.hpp
// says what a sync offers). Included by strata/cuda.hpp.
//
// Each replica's gradients are an arena in the memory of its GPU. Where the replicas run
// (cuda::replica_devices):
// - N logical replicas on device 0, when the process sees fewer than N GPUs: after the
//   barrier each replica sums its slice of every replica's arena in replica order, in one
//   kernel (comm::reduce_range's arithmetic, the CPU step's), into one reduced buffer.
// - One GPU per replica, when it sees at least N (and NCCL is linked): NCCL reduce-scatters
//   the arenas (padded to N equal chunks) so each replica holds the sum of its chunk; after
//   the update, NCCL all-gathers the updated weights so every GPU's copy is whole.

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_communicator.hpp"
#include "strata/comm/thread_group.hpp"
#include "strata/cuda/context.hpp"
#include "strata/cuda/device_replica.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/runtime.hpp"
#if STRATA_CUDA_NCCL
#include "strata/comm/nccl_communicator.hpp"
#endif
#include "strata/policy/communication.hpp"
#include "strata/policy/device.hpp"
#include "strata/policy/strategy.hpp"
#include "strata/train/gradient_sync.hpp"

namespace strata::train {

template <int Replicas>
class DeviceSync : public ReplicaBarrier<Replicas> {
  static_assert(Replicas <= cuda::max_peers, "strata::Cuda: at most 16 logical replicas per device");

 public:
  DeviceSync(comm::ThreadGroup& group, std::span<float> model_gradients, std::span<std::size_t const> /*offsets*/)
      : ReplicaBarrier<Replicas>(group), arena_(model_gradients.size()), devices_(cuda::replica_devices(Replicas)) {
    multi_ = devices_.back() != devices_.front();
    chunk_ = multi_ ? (arena_ + Replicas - 1) / Replicas : arena_;
    padded_ = multi_ ? chunk_ * Replicas : arena_;
    for (int r = 0; r < Replicas; ++r)
      gradients_[std::size_t(r)] = cuda::DeviceBuffer<float>(padded_, devices_[std::size_t(r)], true);
    for (int c = 0; c < copies(); ++c) reduced_.emplace_back(multi_ ? chunk_ : arena_, devices_[std::size_t(c)], true);
#if STRATA_CUDA_NCCL
    if (multi_) comms_ = comm::NcclCommunicator::create_all(devices_);
#endif
  }

  [[nodiscard]] float* gradients(int r) { return gradients_[std::size_t(r)].data(); }
  void begin_reduction(bool) {}
  void layer_done(int, std::size_t) {}
  // After the group's last backward (its sums already waited for): every replica's arena is complete.
  void gradients_ready(int r) {
    cuda::current_context().synchronize();
    this->barrier(r);
  }

  // Replica r's slice of the reduced gradient, times `scale`, enqueued on its context:
  // returns where arena index slice(r).begin of it is, in device memory.
  float* reduce(int r, float scale) {
    cuda::Context& c = cuda::current_context();
    comm::Slice const mine = slice(r);
    long long const n = (long long)(mine.end - mine.begin);
    float* const out = reduced_at(r, mine.begin);
#if STRATA_CUDA_NCCL
    if (multi_) {  // NCCL sums (in its own order) into this replica's chunk; then the scale
      comms_[std::size_t(r)].reduce_scatter(std::span<float const>(gradients_[std::size_t(r)].data(), padded_),
                                            std::span<float>(out, chunk_), comm::ReduceOp::sum);
      if (n > 0) c.launch(cuda::Kernel::scale, n, out, n, scale);
      across_processes(r, out, n);
      return out;
    }
#endif
    if (n == 0) return out;
    struct Peers {
      float const* p[cuda::max_peers];
    } peers{};
    for (int p = 0; p < Replicas; ++p) peers.p[p] = gradients_[std::size_t(p)].data() + mine.begin;
    c.launch(cuda::Kernel::reduce_replicas, n, peers, Replicas, out, n, scale);
    across_processes(r, out, n);
    return out;
  }
  // Where the reduced gradient of arena element `index` (in replica r's slice) is.
  [[nodiscard]] float* reduced_at(int r, std::size_t index) {
    return multi_ ? reduced_[std::size_t(r)].data() + (index - slice(r).begin) : reduced_[0].data() + index;
  }

  // After replica r updated its slice of its copy of the weights (`weights`, padded()
  // floats): across GPUs, every copy gets every slice.
  void share_updated_slice([[maybe_unused]] int r, [[maybe_unused]] float* weights) {
#if STRATA_CUDA_NCCL
    if (!multi_) return;
    cuda::current_context().synchronize();
    comms_[std::size_t(r)].all_gather(std::span<float const>(weights + std::size_t(r) * chunk_, chunk_),
                                      std::span<float>(weights, padded_));
#endif
  }

  // Replica r's slice: equal chunks across GPUs (what NCCL's reduce-scatter hands out),
  // comm::owned_slice on one GPU.
  [[nodiscard]] comm::Slice slice(int r) const {
    if (!multi_) return comm::owned_slice(arena_, Replicas, r);
    return {std::min(arena_, std::size_t(r) * chunk_), std::min(arena_, std::size_t(r + 1) * chunk_)};
  }
  [[nodiscard]] int device_of(int r) const { return devices_[std::size_t(r)]; }
  [[nodiscard]] std::vector<int> const& devices() const { return devices_; }
  [[nodiscard]] bool across_gpus() const { return multi_; }
  // Copies of the weights: one per GPU across GPUs, one shared by logical replicas.
  [[nodiscard]] int copies() const { return multi_ ? Replicas : 1; }
  [[nodiscard]] int copy_of(int r) const { return multi_ ? r : 0; }
  [[nodiscard]] std::size_t padded() const { return padded_; }
  [[nodiscard]] static constexpr int num_replicas_in_sync() { return Replicas; }

 protected:
#if STRATA_CUDA_NCCL
  // A multi-process sync (train/gradient_sync_cuda_mpi.hpp) joins each local replica to the
  // replicas with its index in the other processes: its reduced slice is then summed over
  // them too, hierarchically, as on the CPU. The scale was applied on every process alike.
  void join_processes(std::vector<comm::NcclCommunicator> across) { across_ = std::move(across); }
#endif

 private:
  void across_processes([[maybe_unused]] int r, [[maybe_unused]] float* slice, [[maybe_unused]] long long n) {
#if STRATA_CUDA_NCCL
    if (across_.empty() || n == 0) return;
    cuda::current_context().synchronize();  // NCCL runs on its own stream: the slice must be final
    across_[std::size_t(r)].all_reduce(std::span<float>(slice, std::size_t(n)), comm::ReduceOp::sum);
#endif
  }

  std::size_t arena_;
  std::vector<int> devices_;
  bool multi_ = false;
  std::size_t chunk_ = 0, padded_ = 0;
  std::array<cuda::DeviceBuffer<float>, Replicas> gradients_;
  std::vector<cuda::DeviceBuffer<float>> reduced_;  // the reduced gradient: the arena, or each replica's chunk
#if STRATA_CUDA_NCCL
  std::vector<comm::NcclCommunicator> comms_;   // across GPUs
  std::vector<comm::NcclCommunicator> across_;  // across processes, one per local replica
#endif
};

// MultiWorkerMirrored on Cuda: strata/multi_worker_cuda.hpp defines it (it needs MPI).
template <int LocalN>
class MultiWorkerDeviceSync;
template <class Strategy>
inline constexpr bool multi_worker_cuda_linked = false;

template <int LocalN, class Bucket, class Compression>
struct GradientSync<policy::MultiWorkerMirrored<LocalN>, policy::Cuda, Bucket, Compression> {
  static_assert(std::is_same_v<Compression, policy::NoCompression>,
                "strata::Compress<T> is not built on strata::Cuda yet: gradients cross GPUs in fp32; drop Compress<T>");
  static_assert(multi_worker_cuda_linked<policy::MultiWorkerMirrored<LocalN>>,
                "strata::MultiWorkerMirrored on strata::Cuda needs #include <strata/multi_worker_cuda.hpp> and the "
                "strata::mpi and strata::cuda CMake targets (docs/multi_worker.md)");
  static_assert(Bucket::bytes == policy::default_bucket_bytes,
                "strata::BucketBytes<B> has no effect on strata::Cuda yet: gradients cross GPUs and processes in one "
                "NCCL call per step, not in buckets; drop BucketBytes<B>");
  using type = MultiWorkerDeviceSync<LocalN>;
};

template <InProcessStrategy Strategy, class Bucket, class Compression>
struct GradientSync<Strategy, policy::Cuda, Bucket, Compression> {
  static_assert(std::is_same_v<Compression, policy::NoCompression>,
                "strata::Compress<T> is not built on strata::Cuda yet: gradients cross GPUs in fp32; drop Compress<T>");
  static_assert(Bucket::bytes == policy::default_bucket_bytes,
                "strata::BucketBytes<B> has no effect on OneDevice or Mirrored<N> on strata::Cuda yet: their "
                "gradients are summed in one kernel or one NCCL reduce-scatter per step, not in buckets; drop "
                "BucketBytes<B>");
  using type = DeviceSync<Strategy::replicas>;
};

}  // namespace strata::train
