#pragma once
// NcclCommunicator: the collectives across GPUs, over NCCL (from the CUDA toolkit at
// /usr/local/cuda). Link strata::nccl. Spans passed to it are in DEVICE memory of the
// communicator's GPU; collectives run on its stream and return once complete.
//
// Communicators are created non-blocking and every wait polls against a deadline, so a
// rank that never arrives (at creation or in a collective) ends in a CommError and an
// aborted communicator, not a hang. NCCL itself compares no arguments across ranks: a
// mismatch shows up as that timeout. NCCL reduces bf16/fp16 in its own kernels, which round
// to 16 bits between hops (not strata's single fp32 accumulation: the casts need the GPU
// kernels of the Cuda device backend). Two ranks on one GPU are refused by NCCL.
//
// Bootstrap: one process with many GPUs uses create_all(devices) (then one thread per GPU
// calls the collectives); many processes use over(bootstrap, device), where rank 0 makes
// NCCL's unique id and broadcasts it on any Communicator (an MpiCommunicator).

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "strata/comm/communicator.hpp"
#include "strata/comm/wait.hpp"
#include "strata/core/cuda_device_count.hpp"
#include "strata/core/error.hpp"

namespace strata::comm {

struct NcclOptions {
  std::chrono::milliseconds timeout = default_timeout;
};

class NcclCommunicator {
 public:
  // Joins a communicator of `size` ranks as `rank`, on `device`. Every rank passes the same id.
  NcclCommunicator(ncclUniqueId const& id, int rank, int size, int device, NcclOptions options = {})
      : options_(options), rank_(rank), size_(size), device_(device) {
    if (size < 1 || rank < 0 || rank >= size)
      throw ConfigError(strata::detail::message("NcclCommunicator: rank ", rank, " is not in 0..", size - 1));
    prepare_device();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, size, id, rank, &config), "ncclCommInitRankConfig");
    settle("creating the communicator");
  }

  // One communicator per device of this process, ranks in the order of `devices`. Every
  // rank is created here, so none can be missing: creation blocks until NCCL is ready.
  static std::vector<NcclCommunicator> create_all(std::span<int const> devices, NcclOptions options = {}) {
    ncclUniqueId const id = unique_id();
    int const n = int(devices.size());
    std::vector<NcclCommunicator> comms;
    comms.reserve(devices.size());
    for (int r = 0; r < n; ++r) comms.push_back(NcclCommunicator(Uninitialised{}, options, r, n, devices[std::size_t(r)]));
    ncclResult_t rc = ncclGroupStart();
    for (int r = 0; r < n && rc == ncclSuccess; ++r) {
      cudaSetDevice(devices[std::size_t(r)]);
      rc = ncclCommInitRank(&comms[std::size_t(r)].comm_, n, id, r);
    }
    ncclResult_t const end = ncclGroupEnd();
    if (rc == ncclSuccess) rc = end;
    if (rc != ncclSuccess) {
      for (auto& c : comms) c.broken_ = true;  // half-made: nothing to finalize
      throw CommError(std::string("NcclCommunicator::create_all: ") + ncclGetErrorString(rc) + " (" +
                      ncclGetLastError(nullptr) + ")");
    }
    return comms;
  }

  // Rank 0 makes the id; every rank of `bootstrap` joins, rank r of the new communicator
  // being rank r of bootstrap.
  template <Communicator C>
  static NcclCommunicator over(C& bootstrap, int device, NcclOptions options = {}) {
    ncclUniqueId id{};
    if (bootstrap.rank() == 0) id = unique_id();
    bootstrap.broadcast(std::span<std::byte>(reinterpret_cast<std::byte*>(&id), sizeof id), 0);
    return NcclCommunicator(id, bootstrap.rank(), bootstrap.size(), device, options);
  }

  static ncclUniqueId unique_id() {
    ncclUniqueId id{};
    if (ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess)
      throw CommError(std::string("NcclCommunicator: ncclGetUniqueId failed: ") + ncclGetErrorString(rc));
    return id;
  }

  NcclCommunicator(NcclCommunicator&& other) noexcept { swap(other); }
  NcclCommunicator& operator=(NcclCommunicator&& other) noexcept {
    swap(other);
    return *this;
  }
  ~NcclCommunicator() {
    if (comm_) {
      cudaSetDevice(device_);
      bool clean = !broken_ && ncclCommFinalize(comm_) == ncclSuccess;
      if (clean) {
        try {
          settle("finalizing the communicator");
        } catch (CommError const&) {
          clean = false;  // settle aborted it
        }
      }
      if (comm_) clean ? ncclCommDestroy(comm_) : ncclCommAbort(comm_);
    }
    if (barrier_scratch_) cudaFree(barrier_scratch_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] cudaStream_t stream() const { return stream_; }

  template <Reducible T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    all_reduce(std::span<T const>(data), data, op);
  }
  template <Reducible T>
  void all_reduce(std::span<T const> in, std::span<T> out, ReduceOp op) {
    auto const call = begin(describe_call<T>(Collective::all_reduce, in.size(), out.size(), op));
    run(call, ncclAllReduce(in.data(), out.data(), in.size(), nccl_type<T>(), nccl_op(op), comm_, stream_));
  }
  template <Reducible T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, ReduceOp op) {
    auto const call = begin(describe_call<T>(Collective::reduce_scatter, in.size(), out.size(), op));
    run(call, ncclReduceScatter(in.data(), out.data(), out.size(), nccl_type<T>(), nccl_op(op), comm_, stream_));
  }
  // `in` may be this rank's block of `out` (in place).
  template <Movable T>
  void all_gather(std::span<T const> in, std::span<T> out) {
    auto const call = begin(describe_call<T>(Collective::all_gather, in.size(), out.size()));
    run(call, ncclAllGather(in.data(), out.data(), in.size(), nccl_type<T>(), comm_, stream_));
  }
  template <Movable T>
  void broadcast(std::span<T> data, int root) {
    auto const call = begin(describe_call<T>(Collective::broadcast, data.size(), data.size(), ReduceOp::sum, root));
    run(call, ncclBroadcast(data.data(), data.data(), data.size(), nccl_type<T>(), root, comm_, stream_));
  }
  // NCCL has no barrier: an all_reduce of one float does the same.
  void barrier() {
    auto const call = begin(CallDescriptor{});
    run(call, ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
  }

 private:
  struct Uninitialised {};
  NcclCommunicator(Uninitialised, NcclOptions options, int rank, int size, int device)
      : options_(options), rank_(rank), size_(size), device_(device) {
    prepare_device();
  }

  void prepare_device() {
    if (options_.timeout.count() <= 0)
      throw ConfigError(strata::detail::message("NcclCommunicator: timeout ", options_.timeout.count(),
                                                " ms must be positive"));
    int const devices = strata::cuda_device_count();
    if (device_ < 0 || device_ >= devices)
      throw ConfigError(strata::detail::message("NcclCommunicator: device ", device_, " does not exist (this process sees ",
                                                devices, " CUDA devices)"));
    cuda(cudaSetDevice(device_), "cudaSetDevice");
    cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda(cudaMalloc(&barrier_scratch_, sizeof(float)), "cudaMalloc");
  }

  template <class T>
  static ncclDataType_t nccl_type() {
    if constexpr (std::is_same_v<T, float>) return ncclFloat32;
    else if constexpr (std::is_same_v<T, bf16>) return ncclBfloat16;
    else if constexpr (std::is_same_v<T, fp16>) return ncclFloat16;
    else return ncclUint8;
  }
  static ncclRedOp_t nccl_op(ReduceOp op) {
    switch (op) {
      case ReduceOp::sum: return ncclSum;
      case ReduceOp::mean: return ncclAvg;
      case ReduceOp::max: return ncclMax;
      default: return ncclMin;
    }
  }

  void swap(NcclCommunicator& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(stream_, o.stream_);
    std::swap(barrier_scratch_, o.barrier_scratch_);
    std::swap(options_, o.options_);
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    std::swap(device_, o.device_);
    std::swap(broken_, o.broken_);
  }

  std::string prefix(CallDescriptor const& call) const {
    return strata::detail::message("NcclCommunicator: ", call.describe(), " on rank ", rank_, " of ", size_,
                                   " (device ", device_, "): ");
  }
  void cuda(cudaError_t rc, char const* what) const {
    if (rc != cudaSuccess)
      throw CommError(strata::detail::message("NcclCommunicator: ", what, " on device ", device_, " failed: ",
                                              cudaGetErrorString(rc)));
  }
  void check(ncclResult_t rc, char const* what) {
    if (rc == ncclSuccess || rc == ncclInProgress) return;
    fail(strata::detail::message("NcclCommunicator: ", what, " on rank ", rank_, " of ", size_, " failed: ",
                                 ncclGetErrorString(rc), " (", ncclGetLastError(comm_), ")"));
  }
  [[noreturn]] void fail(std::string const& message) {
    if (comm_ && !broken_) ncclCommAbort(comm_);
    comm_ = nullptr;
    broken_ = true;
    throw CommError(message);
  }

  CallDescriptor begin(CallDescriptor const& call) {
    if (broken_ || !comm_)
      throw CommError(prefix(call) + "this communicator was aborted by an earlier timeout or error; make a new one");
    if (std::string const problem = malformed(call, size_); !problem.empty()) throw CommError(prefix(call) + problem);
    cuda(cudaSetDevice(device_), "cudaSetDevice");
    return call;
  }

  // Waits until the communicator has no operation in progress; aborts it on error or timeout.
  void settle(char const* what) {
    auto const deadline = detail::Clock::now() + options_.timeout;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      int ranks = 0;
      if (state == ncclSuccess && ncclCommCount(comm_, &ranks) == ncclSuccess && ranks == size_) return;
      if (state != ncclSuccess && state != ncclInProgress)
        fail(strata::detail::message("NcclCommunicator: ", what, " on rank ", rank_, " of ", size_, " failed: ",
                                     ncclGetErrorString(state), " (", ncclGetLastError(comm_), ")"));
      if (detail::Clock::now() >= deadline)
        fail(strata::detail::message("NcclCommunicator: ", what, " on rank ", rank_, " of ", size_, " timed out after ",
                                     detail::seconds_text(options_.timeout), ": not every rank joined"));
      std::this_thread::yield();
    }
  }

  // The collective was issued with result `rc`: wait until NCCL has enqueued it and the
  // stream has run it, or the deadline passes (then abort: the peers are gone).
  void run(CallDescriptor const& call, ncclResult_t rc) {
    if (rc != ncclSuccess && rc != ncclInProgress)
      fail(prefix(call) + ncclGetErrorString(rc) + " (" + ncclGetLastError(comm_) + ")");
    auto const deadline = detail::Clock::now() + options_.timeout;
    for (unsigned polls = 0;; ++polls) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress)
        fail(prefix(call) + ncclGetErrorString(state) + " (" + ncclGetLastError(comm_) + ")");
      if (state == ncclSuccess) {
        cudaError_t const done = cudaStreamQuery(stream_);
        if (done == cudaSuccess) return;
        if (done != cudaErrorNotReady) fail(prefix(call) + cudaGetErrorString(done));
      }
      if (polls % 64 == 63 && detail::Clock::now() >= deadline)
        fail(prefix(call) + "timed out after " + detail::seconds_text(options_.timeout) +
             "; the communicator is aborted. Every rank must call the same collectives in the same order");
      detail::cpu_relax();
    }
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* barrier_scratch_ = nullptr;
  NcclOptions options_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  bool broken_ = false;
};

}  // namespace strata::comm
