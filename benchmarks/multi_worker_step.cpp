// Where a MultiWorkerMirrored step's time goes, per bucket size and wire type, for the anchor
// table's step (MLP 784-1024-1024-10, SGD with momentum, global batch 256 of Fashion-MNIST):
// run under mpirun with 2 processes of MultiWorkerMirrored<1> (scripts/multi-worker-bench).
// Each bucket size runs with fp32 gradients on the wire and with Compress<bf16>.
//
//   compute      one process's share alone: OneDevice on its 128 samples (forward,
//                backward, the update), no communication
//   all-reduce   the gradient arena (7.45 MB) all-reduced across the processes in the
//                plan's buckets as the step's sync does it (bf16: rounded, reduced, widened
//                back), nothing else running
//   step         the real step, MultiWorkerMirrored<1> + BucketBytes<B> (+ Compress<bf16>)
//   exposed      step - compute: the communication the step waits for
//   hidden       1 - exposed / all-reduce: the share of the all-reduce overlapped with backward
//
// Each figure is the median over 7 rounds of the mean of 20 steps, after 5 warm-up steps;
// every process runs the same rounds, the chief prints a Markdown table.
//
//   mpirun -np 2 multi_worker_step [--rounds 7] [--steps 20]

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <strata.hpp>
#include <strata/multi_worker.hpp>

#include "mlp_step.hpp"

namespace {

int rounds = 7;
int steps = 20;

// Median over the rounds of the mean seconds of `steps` calls of `step`, aligned across processes.
template <class Step>
double median_step_seconds(Step&& step) {
  for (int i = 0; i < 5; ++i) step();
  std::vector<double> means;
  for (int r = 0; r < rounds; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto const start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    double mean = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
    MPI_Allreduce(MPI_IN_PLACE, &mean, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest process's
    means.push_back(mean);
  }
  std::nth_element(means.begin(), means.begin() + rounds / 2, means.end());
  return means[std::size_t(rounds / 2)];
}

// This process's share of a global batch alone.
double compute_seconds(int processes) {
  static auto const data = strata::data::fashion_mnist(strata::data::Split::train).take(batch_size / std::size_t(processes));
  static auto const stream = data.batch(batch_size / processes).stream(0);
  static strata::data::Batch const* batch = stream->next();
  Model model(1);
  strata::Strategy<strata::OneDevice> strategy;
  ConfigRunner<strata::Strategy<strata::OneDevice>::config> runner(strategy, model, optimizer, strata::SoftmaxCrossEntropy{},
                                                                   batch->size, 7);
  return median_step_seconds([&] { runner.train_on_batch(*batch); });
}

template <std::size_t Bytes, class Compression>
using MultiWorker = strata::Strategy<strata::MultiWorkerMirrored<1>, strata::BucketBytes<Bytes>, Compression>;

// The arena all-reduced bucket by bucket in the wire type, as the step's sync issues it.
template <std::size_t Bytes, class Wire>
double all_reduce_seconds(int& buckets) {
  strata::comm::ThreadGroup group(1);
  strata::comm::WorkerCommunicator communicator(group.communicator(0));
  strata::AlignedBuffer gradients(Model::arena_size);
  std::fill(gradients.data(), gradients.data() + gradients.size(), 1.0f);
  strata::comm::BucketPlan plan(std::span<std::size_t const>(Model::offsets), Bytes);
  buckets = int(plan.buckets().size());
  strata::comm::BucketedAllReduce<strata::comm::WorkerCommunicator, Wire> reduce(
      communicator, std::move(plan), gradients.span(), strata::ReduceOp::sum, strata::comm::Overlap::after_backward);
  return median_step_seconds([&] { reduce.finish(); });
}

template <std::size_t Bytes, class Compression>
double step_seconds() {
  using Strategy = MultiWorker<Bytes, Compression>;
  Model model(1);
  Strategy strategy;
  ConfigRunner<typename Strategy::config> runner(strategy, model, optimizer, strata::SoftmaxCrossEntropy{}, batch_size, 7);
  return median_step_seconds([&] { runner.train_on_batch(real_batch()); });
}

template <std::size_t Bytes, class Compression>
void row(double compute, bool chief) {
  using Wire = typename Compression::wire_type;
  int buckets = 0;
  double const reduce = all_reduce_seconds<Bytes, Wire>(buckets);
  double const step = step_seconds<Bytes, Compression>();
  double const exposed = std::max(0.0, step - compute);
  double const hidden = reduce > 0.0 ? std::clamp(1.0 - exposed / reduce, 0.0, 1.0) : 0.0;
  if (chief)
    std::printf("| %zu KiB | %s | %d | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.0f%% | %.0f |\n", Bytes >> 10,
                strata::dtype_name<Wire>, buckets, compute * 1e3, reduce * 1e3, step * 1e3, exposed * 1e3,
                hidden * 100.0, batch_size / step);
}

template <std::size_t Bytes>
void rows(double compute, bool chief) {
  row<Bytes, strata::NoCompression>(compute, chief);
  row<Bytes, strata::Compress<strata::bf16>>(compute, chief);
}

}  // namespace

int main(int argc, char** argv) {
  strata::comm::MpiEnvironment mpi(argc, argv);
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const flag = argv[i];
    if (flag == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--steps") steps = std::max(1, std::atoi(argv[i + 1]));
  }
  int processes = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bool const chief = rank == 0;
  double const compute = compute_seconds(processes);
  if (chief) {
    std::printf("MultiWorkerMirrored<1> on %d processes, global batch %d, GEMM: %s; median of %d rounds of %d steps\n\n",
                processes, batch_size, strata::cpu_gemm_engine().c_str(), rounds, steps);
    std::printf("| bucket | wire | buckets | compute | all-reduce alone | step | exposed | hidden | samples/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
  }
  rows<std::size_t{256} << 10>(compute, chief);
  rows<std::size_t{1} << 20>(compute, chief);
  rows<std::size_t{5} << 20>(compute, chief);
  rows<std::size_t{25} << 20>(compute, chief);
  return 0;
}
