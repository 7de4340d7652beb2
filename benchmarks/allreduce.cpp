// In-process all-reduce bandwidth, nccl-tests style, for 4 KiB .. 256 MiB per rank:
//   Memcpy               one thread copies the same bytes: the bandwidth reference
//   FusedSum/2           two threads, each over half: a[i] = b[i] = a[i] + b[i]. The least
//                        memory traffic an in-place all-reduce of two buffers can make,
//                        written as one loop: the target ThreadCommunicator is held to
//   ThreadCommunicator/N ThreadCommunicator::all_reduce(sum), in place, N = 2 and 4
// Counters: algbw, busbw (= algbw * 2(n-1)/n), wrong elements (checked after timing).
// The MPI figures come from allreduce_mpi under mpirun; scripts/allreduce-bench runs both
// and prints one table.
//
//   allreduce [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]

#include <cstring>
#include <vector>

#include "allreduce_common.hpp"
#include "strata/comm/thread_communicator.hpp"
#include "strata/comm/thread_group.hpp"
#include "strata/core/aligned_buffer.hpp"

namespace {
using namespace strata;

void memcpy_reference(benchmark::State& state) {
  auto const bytes = state.range(0);
  std::size_t const n = std::size_t(bytes) / sizeof(float);
  AlignedBuffer src(n), dst(n);
  bench::fill(src.span(), 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), std::size_t(bytes));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["algbw"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1024);
}

// Runs body(rank, iterations) on `ranks` threads; rank 0 drives the benchmark's loop.
template <class Body>
void on_threads(benchmark::State& state, comm::ThreadGroup& group, Body body) {
  auto task = [&](int rank) {
    if (rank == 0)
      for (auto _ : state) body(rank);
    else
      for (benchmark::IterationCount i = 0; i < state.max_iterations; ++i) body(rank);
  };
  group.run(task);
}

void fused_sum(benchmark::State& state) {
  auto const bytes = state.range(0);
  std::size_t const n = std::size_t(bytes) / sizeof(float);
  static comm::ThreadGroup group(2);
  AlignedBuffer a(n), b(n);
  bench::fill(a.span(), 0);
  bench::fill(b.span(), 1);
  on_threads(state, group, [&](int rank) {
    comm::Slice const s = comm::owned_slice(n, 2, rank);
    float* __restrict x = a.data();
    float* __restrict y = b.data();
    for (std::size_t i = s.begin; i < s.end; ++i) x[i] = y[i] = x[i] + y[i];
    group.barrier(rank);  // an all-reduce returns only when every rank's buffer is final
  });
  bench::report(state, bytes, 2, 0);
}

template <int N>
void thread_communicator(benchmark::State& state) {
  auto const bytes = state.range(0);
  std::size_t const n = std::size_t(bytes) / sizeof(float);
  static comm::ThreadGroup group(N);
  std::vector<AlignedBuffer> buffers;
  for (int r = 0; r < N; ++r) buffers.emplace_back(n);
  on_threads(state, group, [&](int rank) {
    group.communicator(rank).all_reduce(buffers[std::size_t(rank)].span(), comm::ReduceOp::sum);
  });
  std::size_t wrong = 0;
  auto check = [&](int rank) {
    bench::fill(buffers[std::size_t(rank)].span(), rank);
    group.communicator(rank).all_reduce(buffers[std::size_t(rank)].span(), comm::ReduceOp::sum);
  };
  group.run(check);
  for (auto const& b : buffers) wrong += bench::count_wrong(b.span(), N);
  bench::report(state, bytes, N, wrong);
}

[[maybe_unused]] bool const registered = [] {
  bench::register_sizes("Memcpy", memcpy_reference);
  bench::register_sizes("FusedSum/2", fused_sum);
  bench::register_sizes("ThreadCommunicator/2", thread_communicator<2>);
  bench::register_sizes("ThreadCommunicator/4", thread_communicator<4>);
  return true;
}();
}  // namespace

BENCHMARK_MAIN();
