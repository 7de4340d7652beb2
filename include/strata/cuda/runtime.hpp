#pragma once
// The CUDA runtime, owned: error checks that name the call, device queries, and RAII device
// buffers, pinned host buffers, streams and events. Plain C++ against cuda_runtime.h: no
// nvcc, no device code here (the kernels are compiled at run time, see kernels.hpp).

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "strata/core/cuda_device_count.hpp"
#include "strata/core/error.hpp"

namespace strata::cuda {

inline void check(cudaError_t rc, std::string_view what) {
  if (rc != cudaSuccess)
    throw DeviceError(strata::detail::message("CUDA: ", what, " failed: ", cudaGetErrorName(rc), " (",
                                              cudaGetErrorString(rc), ")"));
}

// The number of CUDA devices this process sees; 0 where there is no GPU or no driver.
inline int device_count() { return cuda_device_count(); }

// Throws the error a user without that device should read, naming the fix.
inline void require_device(int device) {
  int const count = device_count();
  if (count == 0)
    throw DeviceError(strata::detail::message(
        "strata::Cuda: no CUDA device is visible to this process (no GPU, no driver, or CUDA_VISIBLE_DEVICES "
        "hides them); run on a machine with an NVIDIA GPU, or use strata::Cpu"));
  if (device < 0 || device >= count)
    throw DeviceError(strata::detail::message("strata::Cuda: device ", device, " does not exist; this process sees ",
                                              count, " CUDA device(s), numbered 0..", count - 1));
}

struct DeviceInfo {
  std::string name;
  int major = 0;  // compute capability: 9.0 on H100/H200
  int minor = 0;
  int multiprocessors = 0;
  std::size_t memory_bytes = 0;
  [[nodiscard]] int arch() const { return major * 10 + minor; }
};

inline DeviceInfo device_info(int device) {
  require_device(device);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return {prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem};
}

// Makes `device` current for the calling thread until the scope ends.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    check(cudaSetDevice(device), "cudaSetDevice");
  }
  DeviceScope(DeviceScope const&) = delete;
  DeviceScope& operator=(DeviceScope const&) = delete;
  ~DeviceScope() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// Bytes in use on `device`, by every process (cudaMemGetInfo: total minus free); what
// monitoring reports as device memory.
inline std::size_t memory_used(int device) {
  DeviceScope const scope(device);
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total - free;
}

// `count` elements of T in device memory of `device`, uninitialised (zeroed when asked).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t count, int device, bool zero = false) : size_(count), device_(device) {
    if (count == 0) return;
    DeviceScope const on(device);
    cudaError_t const rc = cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T));
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      std::size_t free = 0, total = 0;
      (void)cudaMemGetInfo(&free, &total);
      throw DeviceError(strata::detail::message("strata::Cuda: cannot allocate ", count * sizeof(T), " bytes on device ",
                                                device, " (", free, " of ", total, " bytes free): ",
                                                cudaGetErrorString(rc), "; use a smaller batch or model"));
    }
    if (zero) check(cudaMemset(data_, 0, count * sizeof(T)), "cudaMemset");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer(std::move(o)).swap(*this);
    return *this;
  }
  DeviceBuffer(DeviceBuffer const&) = delete;
  DeviceBuffer& operator=(DeviceBuffer const&) = delete;
  ~DeviceBuffer() {
    if (data_) (void)cudaFree(data_);
  }

  [[nodiscard]] T* data() { return data_; }
  [[nodiscard]] T const* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] int device() const { return device_; }

  void swap(DeviceBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(device_, o.device_);
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  int device_ = 0;
};

// Page-locked host memory: the only host memory a copy can overlap compute from.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t count) : size_(count) {
    if (count) check(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)), "cudaMallocHost");
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  PinnedBuffer(PinnedBuffer const&) = delete;
  PinnedBuffer& operator=(PinnedBuffer const&) = delete;
  ~PinnedBuffer() {
    if (data_) (void)cudaFreeHost(data_);
  }
  [[nodiscard]] T* data() { return data_; }
  [[nodiscard]] T const* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// A non-blocking stream (it does not synchronise with the legacy default stream).
class Stream {
 public:
  Stream() = default;
  explicit Stream(int device) {
    DeviceScope const on(device);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    std::swap(stream_, o.stream_);
    return *this;
  }
  Stream(Stream const&) = delete;
  Stream& operator=(Stream const&) = delete;
  ~Stream() {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  [[nodiscard]] cudaStream_t get() const { return stream_; }
  void synchronize() const { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (a kernel or copy failed)"); }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event without timing: the cheapest way to order one stream after another.
class Event {
 public:
  Event() = default;
  explicit Event(int device) {
    DeviceScope const on(device);
    check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  }
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    std::swap(event_, o.event_);
    return *this;
  }
  Event(Event const&) = delete;
  Event& operator=(Event const&) = delete;
  ~Event() {
    if (event_) (void)cudaEventDestroy(event_);
  }
  void record(cudaStream_t stream) { check(cudaEventRecord(event_, stream), "cudaEventRecord"); }
  // `stream` waits (on the device) until this event's work is done.
  void make_wait(cudaStream_t stream) const { check(cudaStreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent"); }
  void synchronize() const { check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  [[nodiscard]] cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

template <class T>
void copy_to_device(T* device, T const* host, std::size_t count, cudaStream_t stream) {
  if (count) check(cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync to device");
}
template <class T>
void copy_to_host(T* host, T const* device, std::size_t count, cudaStream_t stream) {
  if (count) check(cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync to host");
}
template <class T>
void copy_on_device(T* to, T const* from, std::size_t count, cudaStream_t stream) {
  if (count && to != from)
    check(cudaMemcpyAsync(to, from, count * sizeof(T), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync on device");
}

}  // namespace strata::cuda
