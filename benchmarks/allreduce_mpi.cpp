// All-reduce across MPI processes, nccl-tests style, 4 KiB .. 256 MiB per rank, in place:
//   MPI_Allreduce              the raw call: the reference
//   MpiCommunicator            strata's, with call verification (the default)
//   MpiCommunicator/unverified strata's, verify = false
//   ProcessCommunicator        strata's between the processes of a machine: shared memory
//                              (ShmCommunicator), with 256 KiB and 1 MiB staging per rank
// Run under mpirun (scripts/allreduce-bench does): every rank runs the same benchmarks
// with the same fixed iteration counts; rank 0 reports.
//
//   mpirun -np 2 allreduce_mpi [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]

#include <memory>
#include <vector>

#include "allreduce_common.hpp"
#include "strata/comm/mpi_communicator.hpp"
#include "strata/comm/process_communicator.hpp"
#include "strata/core/aligned_buffer.hpp"

namespace {
using namespace strata;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

template <class AllReduce>
void measure(benchmark::State& state, AllReduce all_reduce) {
  auto const bytes = state.range(0);
  std::size_t const n = std::size_t(bytes) / sizeof(float);
  AlignedBuffer data(n);
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) all_reduce(data.span());
  bench::fill(data.span(), world_rank());
  all_reduce(data.span());
  bench::report(state, bytes, world_size(), bench::count_wrong(data.span(), world_size()));
}

void raw(benchmark::State& state) {
  measure(state, [](std::span<float> d) {
    MPI_Allreduce(MPI_IN_PLACE, d.data(), int(d.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  });
}
// Made after MPI_Init and freed before MPI_Finalize, in main.
std::unique_ptr<comm::MpiCommunicator> checked, unchecked;
std::unique_ptr<comm::ProcessCommunicator> shared_256k, shared_1m;

void verified(benchmark::State& state) {
  measure(state, [](std::span<float> d) { checked->all_reduce(d, comm::ReduceOp::sum); });
}
void unverified(benchmark::State& state) {
  measure(state, [](std::span<float> d) { unchecked->all_reduce(d, comm::ReduceOp::sum); });
}
void shared_memory_256k(benchmark::State& state) {
  measure(state, [](std::span<float> d) { shared_256k->all_reduce(d, comm::ReduceOp::sum); });
}
void shared_memory_1m(benchmark::State& state) {
  measure(state, [](std::span<float> d) { shared_1m->all_reduce(d, comm::ReduceOp::sum); });
}

// Ranks other than 0 run every benchmark but print nothing.
class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(Context const&) override { return true; }
  void ReportRuns(std::vector<Run> const&) override {}
};
}  // namespace

int main(int argc, char** argv) {
  comm::MpiEnvironment mpi(argc, argv);
  checked = std::make_unique<comm::MpiCommunicator>();
  unchecked = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, comm::MpiOptions{.verify = false});
  bench::register_sizes("MPI_Allreduce", raw);
  bench::register_sizes("MpiCommunicator", verified);
  bench::register_sizes("MpiCommunicator/unverified", unverified);
  shared_256k = std::make_unique<comm::ProcessCommunicator>(MPI_COMM_WORLD, comm::ProcessOptions{.staging_bytes = 256 << 10});
  shared_1m = std::make_unique<comm::ProcessCommunicator>(MPI_COMM_WORLD, comm::ProcessOptions{.staging_bytes = 1 << 20});
  bench::register_sizes("ProcessCommunicator/256KiB", shared_memory_256k);
  bench::register_sizes("ProcessCommunicator/1MiB", shared_memory_1m);
  benchmark::Initialize(&argc, argv);
  if (world_rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  checked.reset();
  unchecked.reset();
  shared_256k.reset();
  shared_1m.reset();
}
