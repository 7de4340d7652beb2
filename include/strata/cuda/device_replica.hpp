#pragma once
// What one replica needs on a GPU besides its math: its Context (stream, cuBLAS, scratch),
// a copy stream, and two upload slots, so that the next shard is copied through pinned
// memory while this one computes; and which GPU each of N replicas runs on. Primitives of
// the device: the step and the evaluator that use them are train/'s
// (train/replica_pass_cuda.hpp).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdlib>
#include <type_traits>
#include <vector>

#ifndef STRATA_CUDA_NCCL  // the strata::cuda target defines it 0 where CMake found no libnccl
#if __has_include(<nccl.h>)
#define STRATA_CUDA_NCCL 1
#else
#define STRATA_CUDA_NCCL 0
#endif
#endif

#include "strata/core/dtype.hpp"
#include "strata/cuda/context.hpp"
#include "strata/cuda/runtime.hpp"
#include "strata/strategy/distribute.hpp"

namespace strata::cuda {

// This process's index among the processes of its machine, as the launcher tells it
// (Open MPI's mpirun, Slurm's srun, MPICH's Hydra, torchrun-style LOCAL_RANK); 0 when no
// launcher says. Several processes on one machine then take different GPUs.
inline int node_local_process() {
  for (char const* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (char const* value = std::getenv(name); value && *value) return std::max(0, std::atoi(value));
  return 0;
}

// Where replica r of this process runs. Process k of a machine (node_local_process()) owns
// GPUs k × replicas ... k × replicas + replicas − 1 when the machine has that many and NCCL
// is linked (strata::cuda links it where CMake finds it): one GPU per replica. Otherwise
// every replica runs on one GPU, GPU k modulo the GPUs there are (logical replicas, as
// TensorFlow's logical devices). One process alone starts at GPU 0. Without a GPU, the
// DeviceError that says so, before anything is allocated.
inline std::vector<int> replica_devices(int replicas) {
  require_device(0);
  int const count = device_count(), process = node_local_process();
  std::vector<int> devices(std::size_t(replicas), process % count);
#if STRATA_CUDA_NCCL
  if (replicas > 1 && count >= (process + 1) * replicas)
    for (int r = 0; r < replicas; ++r) devices[std::size_t(r)] = process * replicas + r;
#endif
  return devices;
}

// The GEMM precision of a compute type: bf16 and fp16 factors on tensor cores, else fp32.
template <class T>
inline constexpr GemmPrecision gemm_precision_for =
    std::is_same_v<T, bf16> ? GemmPrecision::bf16 : std::is_same_v<T, fp16> ? GemmPrecision::fp16 : GemmPrecision::fp32;

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

}  // namespace strata::cuda
