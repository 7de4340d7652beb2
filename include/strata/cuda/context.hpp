#pragma once
// cuda::Context: what one replica needs to run on one GPU: the device, its stream, a cuBLAS
// handle, the loaded kernels and small scratch buffers. Every operation of the Cuda backend
// is enqueued on the context's stream, so a replica's step is one ordered stream of work;
// only a value the host must see (a loss sum, a count, a norm) waits for it.
//
// Several contexts may share one GPU: that is how Mirrored<N> runs N logical replicas on one
// device (as TensorFlow's logical devices do). The Cuda backend's static functions act on
// the context bound to the calling thread (ContextBinding), so layers call `B::gemm(...)`
// exactly as they do on the CPU.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/core/tensor.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/cuda/runtime.hpp"

namespace strata::cuda {

inline void check(cublasStatus_t rc, std::string_view what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(strata::detail::message("cuBLAS: ", what, " failed: ", cublasGetStatusString(rc)));
}

// How a GEMM multiplies. fp32: IEEE float FMAs. tf32: float in and out, tensor cores with
// 10-bit mantissas inside. bf16 and fp16: both factors rounded to 16 bits, tensor cores,
// float accumulation and float output (mixed precision).
enum class GemmPrecision { fp32, tf32, bf16, fp16 };

inline constexpr char const* gemm_precision_name(GemmPrecision p) {
  switch (p) {
    case GemmPrecision::fp32: return "fp32";
    case GemmPrecision::tf32: return "tf32";
    case GemmPrecision::bf16: return "bf16";
    default: return "fp16";
  }
}

class Context {
 public:
  explicit Context(int device, GemmPrecision precision = GemmPrecision::fp32)
      : info_(device_info(device)), device_(device), precision_(precision), stream_(device) {
    DeviceScope const on(device);
    kernels_ = &KernelLibrary::for_arch(info_.arch());
    check(cublasCreate(&cublas_), "cublasCreate");
    check(cublasSetStream(cublas_, stream_.get()), "cublasSetStream");
    max_blocks_ = std::max(1, info_.multiprocessors * 32);
    partials_ = DeviceBuffer<double>(std::size_t(sum_blocks), device);
    flags_ = DeviceBuffer<Flags>(1, device);
    readback_ = PinnedBuffer<Flags>(1);
    input_check_ = DeviceBuffer<int>(1, device);
    input_readback_ = PinnedBuffer<int>(1);
  }
  Context(Context const&) = delete;
  Context& operator=(Context const&) = delete;
  ~Context() {
    if (cublas_) (void)cublasDestroy(cublas_);
  }

  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] DeviceInfo const& info() const { return info_; }
  [[nodiscard]] cudaStream_t stream() const { return stream_.get(); }
  [[nodiscard]] GemmPrecision precision() const { return precision_; }
  void set_precision(GemmPrecision p) { precision_ = p; }
  void synchronize() const { stream_.synchronize(); }

  // An element-wise kernel over n items: as many blocks as needed, at most 32 per SM (the
  // kernels loop over the rest).
  template <class... Args>
  void launch(Kernel k, std::int64_t n, Args... args) {
    if (n <= 0) return;
    auto const blocks = std::min<std::int64_t>((n + block_threads - 1) / block_threads, max_blocks_);
    launch_blocks(k, int(blocks), args...);
  }
  template <class... Args>
  void launch_blocks(Kernel k, int blocks, Args... args) {
    void* argv[] = {static_cast<void*>(&args)...};
    check(cudaLaunchKernel(reinterpret_cast<void const*>((*kernels_)[k]), dim3(unsigned(blocks)), dim3(block_threads),
                           argv, 0, stream()),
          kernel_names[int(k)]);
  }

  // Kernel `index` of a module (a layer's own kernels, cuda/kernels.hpp's KernelModule):
  // over n items as launch() does, or on `blocks` blocks. The module is loaded on this
  // context's first launch of it, then found in a short list.
  template <class... Args>
  void launch(KernelModule const& module, std::size_t index, std::int64_t n, Args... args) {
    if (n <= 0) return;
    auto const blocks = std::min<std::int64_t>((n + block_threads - 1) / block_threads, max_blocks_);
    launch_blocks(module, index, int(blocks), args...);
  }
  template <class... Args>
  void launch_blocks(KernelModule const& module, std::size_t index, int blocks, Args... args) {
    void* argv[] = {static_cast<void*>(&args)...};
    check(cudaLaunchKernel(reinterpret_cast<void const*>(library(module)[index]), dim3(unsigned(blocks)),
                           dim3(block_threads), argv, 0, stream()),
          module.kernels[index]);
  }
  KernelLibrary const& library(KernelModule const& module) {
    for (auto const& [m, library] : modules_)
      if (m == &module) return *library;
    DeviceScope const on(device_);
    modules_.emplace_back(&module, &KernelLibrary::for_module(module, info_.arch()));
    return *modules_.back().second;
  }

  // c = alpha * op(a) * op(b) + beta * c, column-major, in this context's GemmPrecision.
  void gemm(bool transpose_a, bool transpose_b, float alpha, ConstMatrixView a, ConstMatrixView b, float beta, MatrixView c) {
    int const inner = transpose_a ? a.rows : a.cols;
    if (c.size() == 0) return;
    if (inner == 0) {  // an empty sum: only beta * c remains
      if (beta == 0.0f) check(cudaMemsetAsync(c.data, 0, c.size() * sizeof(float), stream()), "cudaMemsetAsync");
      else if (beta != 1.0f) launch(Kernel::scale, std::int64_t(c.size()), c.data, (long long)c.size(), beta);
      return;
    }
    cublasOperation_t const op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t const op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    void const* pa = a.data;
    void const* pb = b.data;
    cudaDataType_t type = CUDA_R_32F;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (precision_ == GemmPrecision::tf32) {
      compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    } else if (precision_ == GemmPrecision::bf16 || precision_ == GemmPrecision::fp16) {
      bool const bf = precision_ == GemmPrecision::bf16;
      type = bf ? CUDA_R_16BF : CUDA_R_16F;
      Kernel const cast = bf ? Kernel::to_bf16 : Kernel::to_fp16;
      ensure(half_a_, a.size());
      ensure(half_b_, b.size());
      launch(cast, std::int64_t(a.size()), a.data, half_a_.data(), (long long)a.size());
      launch(cast, std::int64_t(b.size()), b.data, half_b_.data(), (long long)b.size());
      pa = half_a_.data();
      pb = half_b_.data();
    }
    check(cublasGemmEx(cublas_, op_a, op_b, c.rows, c.cols, inner, &alpha, pa, type, std::max(1, a.rows), pb, type,
                       std::max(1, b.rows), &beta, c.data, CUDA_R_32F, std::max(1, c.rows), compute, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  }

  // One GEMM per item of a batch, on float matrices `stride_*` floats apart (attention's
  // per-sample products): c_i = alpha * op(a_i) * op(b_i) + beta * c_i, column-major, m x n
  // with inner size k. Inputs stay float; bf16 and fp16 contexts let cuBLAS round them to
  // 16 bits inside the tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF / _16F), tf32 likewise.
  struct Strided {
    float const* data;
    int ld;
    long long stride;
  };
  void gemm_batched(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, Strided a, Strided b, float beta,
                    float* c, int ldc, long long stride_c, int batch) {
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    switch (precision_) {
      case GemmPrecision::tf32: compute = CUBLAS_COMPUTE_32F_FAST_TF32; break;
      case GemmPrecision::bf16: compute = CUBLAS_COMPUTE_32F_FAST_16BF; break;
      case GemmPrecision::fp16: compute = CUBLAS_COMPUTE_32F_FAST_16F; break;
      default: break;
    }
    check(cublasGemmStridedBatchedEx(cublas_, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, a.data, CUDA_R_32F, a.ld,
                                     a.stride, b.data, CUDA_R_32F, b.ld, b.stride, &beta, c, CUDA_R_32F, ldc, stride_c,
                                     batch, compute, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx");
  }

  // An input check on the device (a bad token id): reset, let kernels atomicMin the first
  // bad index into input_check(), then read it (one wait). Apart from the flags, which the
  // deferred loss owns during a step.
  int* input_check() { return input_check_.data(); }
  void reset_input_check() {
    check(cudaMemsetAsync(input_check_.data(), 0x7f, sizeof(int), stream()), "cudaMemsetAsync");
  }
  [[nodiscard]] int read_input_check() {
    copy_to_host(input_readback_.data(), input_check_.data(), 1, stream());
    synchronize();
    return *input_readback_.data();
  }

  // out = beta * out + sum over columns of x (a GEMV with a vector of ones).
  void row_sums(ConstMatrixView x, float beta, float* out) {
    if (x.rows == 0) return;
    if (x.cols == 0) {
      if (beta == 0.0f) check(cudaMemsetAsync(out, 0, std::size_t(x.rows) * sizeof(float), stream()), "cudaMemsetAsync");
      else if (beta != 1.0f) launch(Kernel::scale, x.rows, out, (long long)x.rows, beta);
      return;
    }
    ensure_ones(x.cols);
    float const one = 1.0f;
    check(cublasSgemv(cublas_, CUBLAS_OP_N, x.rows, x.cols, &one, x.data, x.rows, ones_.data(), 1, &beta, out, 1),
          "cublasSgemv");
  }

  // Sum of the per-item doubles in `items[0..n)`, formed on the device in a fixed order.
  double sum(double const* items, int n) {
    launch_blocks(Kernel::sum_doubles, 1, items, n, &flags_.data()->value);
    return read_flags().value;
  }

  // Sum of squares of x[0..n) in double (a fixed grid, then one block: a fixed order).
  double sum_of_squares(float const* x, std::size_t n) {
    launch_blocks(Kernel::sum_squares, sum_blocks, x, (long long)n, partials_.data());
    return sum(partials_.data(), sum_blocks);
  }

  // Per-sample scratch (losses), grown to the largest batch seen; sized up front by the trainer.
  double* per_sample(int samples) {
    ensure(per_sample_, std::size_t(std::max(1, samples)));
    return per_sample_.data();
  }

  // Small values the host reads back after a kernel; one pinned copy, one wait.
  struct Flags {
    double value = 0.0;
    unsigned long long count = 0;
    int bad = 0;  // the first bad sample, or no_bad_sample
    static constexpr int no_bad_sample = 0x7f7f7f7f;  // what reset_flags() leaves: more than any sample index
  };
  Flags* device_flags() { return flags_.data(); }
  void reset_flags() {  // bad = no_bad_sample (0x7f in every byte), value = count = 0
    check(cudaMemsetAsync(flags_.data(), 0, sizeof(Flags), stream()), "cudaMemsetAsync");
    check(cudaMemsetAsync(&flags_.data()->bad, 0x7f, sizeof(int), stream()), "cudaMemsetAsync");
  }
  Flags read_flags() {
    copy_to_host(readback_.data(), flags_.data(), 1, stream());
    synchronize();
    return *readback_.data();
  }

  // Deferred sums (the training step): while on, the loss and the metric leave their sums in
  // device_flags() and return 0, so the step enqueues its backward pass and the next batch's
  // upload before the host waits, once, for them (CudaBackend::collect_sums). One loss and
  // one metric call per window.
  struct Deferred {
    bool on = false;
    double loss_factor = 1.0;       // what the flagged loss sum is multiplied by (1/width for MSE)
    float const* labels = nullptr;  // class labels the flagged first bad sample indexes
    int classes = 0;
  };
  [[nodiscard]] Deferred& deferred() { return deferred_; }

  // Reserves the growable scratch for GEMMs of up to `floats` elements per factor and
  // batches of `samples`, so that no step allocates (the trainer calls it up front).
  void reserve(std::size_t floats, int samples) {
    if (precision_ == GemmPrecision::bf16 || precision_ == GemmPrecision::fp16) {
      ensure(half_a_, floats);
      ensure(half_b_, floats);
    }
    per_sample(samples);
    ensure_ones(samples);
  }

 private:
  void ensure_ones(int n) {
    if (ones_.size() >= std::size_t(n)) return;
    synchronize();
    std::vector<float> const host(std::size_t(n), 1.0f);
    ones_ = DeviceBuffer<float>(host.size(), device_);
    check(cudaMemcpy(ones_.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  }

  template <class T>
  void ensure(DeviceBuffer<T>& buffer, std::size_t n) {
    if (buffer.size() < n) {
      synchronize();  // the old buffer may still be read by queued work
      buffer = DeviceBuffer<T>(n, device_);
    }
  }

  DeviceInfo info_;
  int device_ = 0;
  GemmPrecision precision_ = GemmPrecision::fp32;
  Stream stream_;
  KernelLibrary const* kernels_ = nullptr;
  std::vector<std::pair<KernelModule const*, KernelLibrary const*>> modules_;  // loaded on first use
  cublasHandle_t cublas_ = nullptr;
  int max_blocks_ = 1;
  DeviceBuffer<std::uint16_t> half_a_, half_b_;  // 16-bit copies of GEMM factors
  DeviceBuffer<float> ones_;
  DeviceBuffer<double> per_sample_;
  DeviceBuffer<double> partials_;
  DeviceBuffer<Flags> flags_;
  PinnedBuffer<Flags> readback_;
  DeviceBuffer<int> input_check_;
  PinnedBuffer<int> input_readback_;
  Deferred deferred_;
};

namespace detail {
inline thread_local Context* bound_context = nullptr;
}

// The context the Cuda backend's functions use on this thread.
inline Context& current_context() {
  if (detail::bound_context == nullptr)
    throw DeviceError("strata::CudaBackend: no cuda::Context is bound to this thread; construct a "
                      "strata::cuda::ContextBinding (the Trainer does this for each replica)");
  return *detail::bound_context;
}

// Binds a context to the calling thread (and makes its device current) for a scope.
class ContextBinding {
 public:
  explicit ContextBinding(Context& context) : previous_(detail::bound_context), device_(context.device()) {
    detail::bound_context = &context;
  }
  ContextBinding(ContextBinding const&) = delete;
  ContextBinding& operator=(ContextBinding const&) = delete;
  ~ContextBinding() { detail::bound_context = previous_; }

 private:
  Context* previous_;
  DeviceScope device_;
};

}  // namespace strata::cuda
