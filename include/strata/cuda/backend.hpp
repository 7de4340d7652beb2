#pragma once
// CudaBackend: the Backend of the Cuda device policy. The same static functions as
// CpuBackend, over views of DEVICE memory, enqueued on the stream of the cuda::Context bound
// to the calling thread. Layers, losses and metrics are unchanged: Dense<In, Out> calls
// B::gemm and B::add_bias whether B is the CPU's or this one.
//
// The functions that return a number to the host (a loss sum, a count of correct
// predictions) wait for the stream, unless the bound context defers them (defer_sums: the
// training step and the evaluator wait once per batch); everything else only enqueues.

#include <cstdint>
#include <utility>

#include "strata/core/backend.hpp"
#include "strata/core/dtype.hpp"
#include "strata/cuda/context.hpp"
#include "strata/strategy/backend_for.hpp"

namespace strata {

namespace cuda {
// A workspace matrix in device memory, allocated on the current device (zeroed).
class DeviceMatrix {
 public:
  void resize(int rows, int cols) {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    buffer_ = DeviceBuffer<float>(std::size_t(rows) * std::size_t(cols), device, true);
  }
  void setZero(int rows, int cols) { resize(rows, cols); }
  [[nodiscard]] float* data() { return buffer_.data(); }
  [[nodiscard]] float const* data() const { return buffer_.data(); }
  [[nodiscard]] std::size_t size() const { return buffer_.size(); }

 private:
  DeviceBuffer<float> buffer_;
};
}  // namespace cuda

struct CudaBackend {
  using Buffer = cuda::DeviceMatrix;  // workspaces keep activations in device memory

  static void gemm(Transpose op_a, Transpose op_b, float alpha, ConstMatrixView a, ConstMatrixView b, float beta,
                   MatrixView c) {
    ctx().gemm(op_a == Transpose::yes, op_b == Transpose::yes, alpha, a, b, beta, c);
  }
  static void add_bias(MatrixView y, float const* bias) {
    elementwise(cuda::Kernel::add_bias, y.size(), y.data, bias, y.rows, count(y.size()));
  }
  static void row_sums(ConstMatrixView x, float beta, float* out) { ctx().row_sums(x, beta, out); }
  static void copy(ConstMatrixView x, MatrixView y) { cuda::copy_on_device(y.data, x.data, x.size(), ctx().stream()); }

  // Deferred sums on the bound context (cuda::Context::Deferred): defer_sums() opens the
  // window; collect_sums() waits once, closes it and returns the loss sum and the count of
  // correct predictions, or throws the CPU backend's message for a bad label.
  struct Sums {
    double loss = 0.0;
    std::int64_t correct = 0;
  };
  static void defer_sums() {
    auto& c = ctx();
    c.reset_flags();
    c.deferred() = {.on = true};
  }
  static Sums collect_sums() {
    auto& c = ctx();
    auto const deferred = std::exchange(c.deferred(), {});
    auto const flags = c.read_flags();
    if (deferred.labels) check_label(c, flags.bad, deferred.labels, deferred.classes);
    return {flags.value * deferred.loss_factor, std::int64_t(flags.count)};
  }

  // x[i] = float(T(x[i])) on the device: what mixed precision does to activations.
  template <class T>
  static void round_to(float* x, std::size_t n) {
    if constexpr (std::is_same_v<T, bf16>) elementwise(cuda::Kernel::round_bf16, n, x, count(n));
    else if constexpr (std::is_same_v<T, fp16>) elementwise(cuda::Kernel::round_fp16, n, x, count(n));
  }

  // For the device math beside each layer (nn/*_cuda.hpp).
  static cuda::Context& ctx() { return cuda::current_context(); }
  // `bad`: the first sample whose label is not a class index, or more than any sample.
  static void check_label(cuda::Context& c, int bad, float const* labels, int classes) {
    if (bad == cuda::Context::Flags::no_bad_sample) return;
    float value = 0.0f;
    cuda::copy_to_host(&value, labels + bad, 1, c.stream());
    c.synchronize();
    strata::checked_label(value, classes, bad);  // throws the CPU's message
  }
  static long long count(std::size_t n) { return static_cast<long long>(n); }
  template <class... Args>
  static void elementwise(cuda::Kernel k, std::size_t n, Args... args) {
    ctx().launch(k, std::int64_t(n), args...);
  }
};

static_assert(Backend<CudaBackend>);

template <>
struct backend_for<policy::Cuda> {
  using type = CudaBackend;
};

}  // namespace strata
