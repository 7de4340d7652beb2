#pragma once
// The GradientSync of MultiWorkerMirrored<LocalN> on Cuda: DeviceSync's step inside the
// process (one kernel over logical replicas, or NCCL reduce-scatter across its GPUs), then
// each local replica's reduced slice all-reduced over NCCL with the replicas of the same
// local index in every other process, so every process holds the whole summed gradient and
// updates its weights as on the CPU. NCCL is bootstrapped through MPI: for each local
// replica, an MpiCommunicator over the processes carries NCCL's unique id from the chief.
// The chief's weights and optimizer state are broadcast over MPI at the start. Included by
// strata/multi_worker_cuda.hpp.
//
// Which GPUs a process uses: cuda::replica_devices (the launcher's node-local rank picks
// them). Every process of a machine needs GPUs of its own: NCCL refuses two ranks of one
// communicator on one GPU.

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <mpi.h>

#include "strata/comm/mpi_communicator.hpp"
#include "strata/comm/nccl_communicator.hpp"
#include "strata/comm/thread_group.hpp"
#include "strata/core/error.hpp"
#include "strata/policy/strategy.hpp"
#include "strata/train/gradient_sync.hpp"
#include "strata/train/gradient_sync_cuda.hpp"

namespace strata::train {

template <int LocalN>
inline constexpr bool multi_worker_cuda_linked<policy::MultiWorkerMirrored<LocalN>> = true;

template <int LocalN>
class MultiWorkerDeviceSync : public DeviceSync<LocalN> {
  using base = DeviceSync<LocalN>;

 public:
  MultiWorkerDeviceSync(comm::ThreadGroup& group, std::span<float> model_gradients,
                        std::span<std::size_t const> layer_offsets)
      : base(group, model_gradients, layer_offsets) {
#if STRATA_CUDA_NCCL
    auto const timeout = group.rendezvous().timeout();
    std::vector<comm::NcclCommunicator> across;
    for (int r = 0; r < LocalN; ++r) {  // in replica order on every process: each creation is collective
      processes_.push_back(std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, comm::MpiOptions{.timeout = timeout}));
      across.push_back(comm::NcclCommunicator::over(*processes_.back(), this->device_of(r), {.timeout = timeout}));
    }
    this->join_processes(std::move(across));
#else
    throw ConfigError(
        "MultiWorkerMirrored on strata::Cuda crosses processes over NCCL, and this build found no libnccl: install "
        "NCCL (libnccl-dev, or the CUDA toolkit's) and reconfigure");
#endif
  }

  // Replicas of the whole job, and the job-wide index of this process's first.
  [[nodiscard]] int num_replicas_in_sync() const { return LocalN * processes_.front()->size(); }
  [[nodiscard]] int first_replica() const { return LocalN * processes_.front()->rank(); }

  // The chief's weights and optimizer state on every process (host memory: the update's
  // resume() sends them to the devices).
  template <class State>
  void share_from_chief(std::span<float> weights, State& state) {
    train::share_from_chief(*processes_.front(), weights, state);
  }

 private:
  std::vector<std::unique_ptr<comm::MpiCommunicator>> processes_;  // one per local replica
};

}  // namespace strata::train
