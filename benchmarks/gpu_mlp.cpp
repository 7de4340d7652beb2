// The wide MLP on one GPU: strata's whole training step (Trainer<OneDevice, Cuda>'s step
// runner: forward, loss, backward, update, and the next batch's upload overlapped with them) against cuBLAS alone running the same
// GEMMs on operands already in device memory and already in the GEMM's type, measured in the
// same run. Model 1024-8192-8192-8192-10, batch 8192, SGD with momentum. One more case runs
// the bf16 step under CentralStorage<1> (the variables and their update on the host).
//
//   gpu_mlp --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Counters: TFLOPs (per second, the step's GEMM work / time), samples/s, and, for the step,
// share_of_gemm (cuBLAS-alone time / step time, from the GemmOnly case of the same precision
// run just before it). Without a GPU every case reports an error and the program exits 0.
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strata.hpp"
#include "strata/cuda.hpp"

using namespace strata;

namespace {

constexpr int batch = 8192;
using Wide = Sequential<Dense<1024, 8192>, Relu, Dense<8192, 8192>, Relu, Dense<8192, 8192>, Relu, Dense<8192, 10>>;

struct Shape {
  int in, out;
};
constexpr std::array<Shape, 4> dense_shapes{{{1024, 8192}, {8192, 8192}, {8192, 8192}, {8192, 10}}};

// GEMM FLOPs of one step: forward and weight gradients for every layer, input gradients for
// every layer but the first.
constexpr double step_flops() {
  double f = 0.0;
  for (std::size_t i = 0; i < dense_shapes.size(); ++i) {
    double const mac = double(dense_shapes[i].in) * dense_shapes[i].out * batch;
    f += 2.0 * mac * (i == 0 ? 2.0 : 3.0);
  }
  return f;
}

// Median seconds of the cuBLAS-alone step per precision, for share_of_gemm.
std::map<std::string, double>& gemm_seconds() {
  static std::map<std::string, double> seconds;
  return seconds;
}

bool have_gpu(benchmark::State& state) {
  if (cuda::device_count() > 0) return true;
  state.SkipWithError("no CUDA device: run on a GPU machine (scripts/gpu-check)");
  for (auto _ : state) {
  }
  return false;
}

void set_counters(benchmark::State& state, double seconds_per_step) {
  state.counters["TFLOPs"] = step_flops() / seconds_per_step / 1e12;
  state.counters["samples/s"] = batch / seconds_per_step;
}

// cuBLAS alone: the step's 11 GEMMs, operands resident and already in the GEMM's type.
void GemmOnly(benchmark::State& state, cuda::GemmPrecision precision) {
  if (!have_gpu(state)) return;
  bool const half = precision == cuda::GemmPrecision::bf16 || precision == cuda::GemmPrecision::fp16;
  cudaDataType_t const type = !half ? CUDA_R_32F : precision == cuda::GemmPrecision::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  cublasComputeType_t const compute =
      precision == cuda::GemmPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  std::size_t const element = half ? 2 : 4;
  std::size_t const big = std::size_t(8192) * 8192;
  cuda::DeviceBuffer<char> a(big * element, 0), b(big * element, 0);
  cuda::DeviceBuffer<float> c(big, 0);
  cuda::check(cudaMemset(a.data(), 0, a.size()), "memset");
  cuda::check(cudaMemset(b.data(), 0, b.size()), "memset");
  cuda::Stream stream(0);
  cublasHandle_t handle = nullptr;
  cuda::check(cublasCreate(&handle), "cublasCreate");
  cuda::check(cublasSetStream(handle, stream.get()), "cublasSetStream");
  float const one = 1.0f, zero = 0.0f;
  auto gemm = [&](cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k) {
    int const lda = ta == CUBLAS_OP_N ? m : k, ldb = tb == CUBLAS_OP_N ? k : n;
    cuda::check(cublasGemmEx(handle, ta, tb, m, n, k, &one, a.data(), type, lda, b.data(), type, ldb, &zero, c.data(),
                             CUDA_R_32F, m, compute, CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
  };
  auto step = [&] {
    for (auto s : dense_shapes) gemm(CUBLAS_OP_N, CUBLAS_OP_N, s.out, batch, s.in);  // y = W x
    for (std::size_t i = dense_shapes.size(); i-- > 0;) {
      auto const s = dense_shapes[i];
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, s.out, s.in, batch);                // dW = dy x^T
      if (i > 0) gemm(CUBLAS_OP_T, CUBLAS_OP_N, s.in, batch, s.out);     // dx = W^T dy
    }
  };
  step();  // warm-up: cuBLAS picks its kernels
  stream.synchronize();
  cudaEvent_t timed_start = nullptr, timed_stop = nullptr;
  cudaEventCreate(&timed_start);
  cudaEventCreate(&timed_stop);
  std::vector<double> times;
  for (auto _ : state) {
    cudaEventRecord(timed_start, stream.get());
    step();
    cudaEventRecord(timed_stop, stream.get());
    cudaEventSynchronize(timed_stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, timed_start, timed_stop);
    state.SetIterationTime(ms / 1e3);
    times.push_back(ms / 1e3);
  }
  cudaEventDestroy(timed_start);
  cudaEventDestroy(timed_stop);
  cublasDestroy(handle);
  std::sort(times.begin(), times.end());
  double const median = times[times.size() / 2];
  gemm_seconds()[cuda::gemm_precision_name(precision)] = median;
  set_counters(state, median);
}

// strata's step: a Trainer's device step runner on one host batch per step. Under
// CentralStorage<1> the same GPU computes and the host holds the variables and updates them:
// the gradients come to the host and the weights go back on every step.
template <class Precision, class Strategy = OneDevice>
void Step(benchmark::State& state, cuda::GemmPrecision precision) {
  if (!have_gpu(state)) return;
  static auto model = std::make_unique<Wide>(1);
  Rng rng(2);
  Matrix features(1024, batch);
  for (Eigen::Index i = 0; i < features.size(); ++i) features.data()[i] = rng.uniform() - 0.5f;
  std::vector<std::int32_t> labels(batch);
  for (auto& l : labels) l = std::int32_t(rng() % 10);
  data::Dataset const data(std::move(features), labels);
  using Config = policy::Config<Strategy, Cuda, Precision>;
  strategy::BasicStrategy<Config> strategy;
  train::StepRunner<Config, Wide, Sgd, SoftmaxCrossEntropy> runner(
      strategy, *model, Sgd{.lr = 1e-4f, .momentum = 0.9f}, SoftmaxCrossEntropy{}, batch, 0);
  if (precision == cuda::GemmPrecision::tf32) runner.set_gemm_precision(precision);
  data::Batch const one{data.features(), data.targets(), batch, 0};
  runner.train_on_batch(one, &one);  // warm-up; `one` is also the next step's batch, copied ahead as in fit
  std::vector<double> times;
  for (auto _ : state) {
    auto const start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(runner.train_on_batch(one, &one));  // returns when the weights are updated
    double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(seconds);
    times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  double const median = times[times.size() / 2];
  set_counters(state, median);
  if (auto it = gemm_seconds().find(cuda::gemm_precision_name(precision)); it != gemm_seconds().end())
    state.counters["share_of_gemm"] = it->second / median;
}

}  // namespace

int main(int argc, char** argv) {
  // Each GemmOnly case runs just before the Step case of its precision (share_of_gemm).
  auto add = [](char const* name, auto fn) {
    benchmark::RegisterBenchmark(name, fn)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
  };
  using P = cuda::GemmPrecision;
  add("GemmOnly/fp32", [](benchmark::State& s) { GemmOnly(s, P::fp32); });
  add("Step/fp32", [](benchmark::State& s) { Step<FullPrecision>(s, P::fp32); });
  add("GemmOnly/tf32", [](benchmark::State& s) { GemmOnly(s, P::tf32); });
  add("Step/tf32", [](benchmark::State& s) { Step<FullPrecision>(s, P::tf32); });
  add("GemmOnly/bf16", [](benchmark::State& s) { GemmOnly(s, P::bf16); });
  add("Step/bf16", [](benchmark::State& s) { Step<MixedPrecision>(s, P::bf16); });
  add("Step/bf16/CentralStorage<1>", [](benchmark::State& s) { Step<MixedPrecision, CentralStorage<1>>(s, P::bf16); });
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
