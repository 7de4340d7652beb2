#pragma once
// The GradientSync of MultiWorkerMirrored<LocalN> on the CPU: CommunicatorSync over a
// WorkerCommunicator per replica (train/gradient_sync.hpp): the replicas of a process
// reduce among themselves, the processes all-reduce over MPI, bucket by bucket
// (BucketBytes<B>) while backward runs, as T under Compress<T>. Included by strata/multi_worker.hpp.

#include <cstddef>
#include <span>

#include "strata/comm/thread_group.hpp"
#include "strata/comm/worker_communicator.hpp"
#include "strata/policy/device.hpp"
#include "strata/policy/strategy.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/train/gradient_sync.hpp"

namespace strata {

namespace strategy {
template <int LocalN>
inline constexpr bool multi_worker_linked<policy::MultiWorkerMirrored<LocalN>> = true;
}  // namespace strategy

namespace train {

// Local replicas × the processes of MPI_COMM_WORLD.
template <int LocalN, std::size_t BucketBytes, class Wire = float>
class MultiWorkerSync : public CommunicatorSync<comm::WorkerCommunicator, LocalN, BucketBytes, Wire> {
  using base = CommunicatorSync<comm::WorkerCommunicator, LocalN, BucketBytes, Wire>;

 public:
  MultiWorkerSync(comm::ThreadGroup& group, std::span<float> model_gradients, std::span<std::size_t const> layer_offsets)
      : base(group, model_gradients, layer_offsets,
             [&group](int r) {
               // The replica threads' timeout (StrategyOptions::timeout) is the processes' too.
               return comm::WorkerCommunicator(group.communicator(r), MPI_COMM_WORLD,
                                               {.timeout = group.rendezvous().timeout()});
             }) {}
};

// Compress<T>: every bucket crosses the processes (and the replica threads) as T.
template <int LocalN, class Bucket, class Compression>
struct GradientSync<policy::MultiWorkerMirrored<LocalN>, policy::Cpu, Bucket, Compression> {
  using type = MultiWorkerSync<LocalN, Bucket::bytes, typename Compression::wire_type>;
};

}  // namespace train
}  // namespace strata
