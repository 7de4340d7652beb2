// MultiWorkerMirrored<1> on Cuda across the processes of an MPI job (CTest
// multi_worker_cuda.np1 and .np2; scripts/gpu-check runs them on a GPU machine). Each
// process needs a GPU of its own; with fewer, every process exits 77 (skipped). The oracle
// is the CPU: Mirrored<processes> in one process on the same data and seed, weights within
// the fp32 tolerance of the Cuda tests (2e-4) after 2 epochs. Workers start from different
// seeds: the chief's broadcast makes them one model.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "mpi_world.hpp"
#include "random_matrix.hpp"
#include "strata.hpp"
#include "strata/multi_worker_cuda.hpp"

using namespace strata;

namespace {
using Model = Sequential<Dense<20, 32>, Relu, Dropout, Dense<32, 5>>;

template <class... Ps>
std::vector<float> train(std::uint64_t seed) {
  Model model(seed);
  Trainer<Ps...> trainer;
  trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, synthetic(384), {.epochs = 2, .batch_size = 48, .seed = 3});
  return {model.parameters().begin(), model.parameters().end()};
}

template <int Processes>
int compare() {
  auto const gpu = train<MultiWorkerMirrored<1>, Cuda>(100 + std::uint64_t(world_rank()));
  auto const cpu = train<Mirrored<Processes>>(100);
  double worst = 0.0;
  for (std::size_t i = 0; i < gpu.size(); ++i) worst = std::max(worst, double(std::abs(gpu[i] - cpu[i])));
  std::vector<float> chief = gpu;
  MPI_Bcast(chief.data(), int(chief.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  bool const same = chief == gpu;
  std::printf("rank %d: largest difference from the CPU %.3g; %s the chief's bits\n", world_rank(), worst,
              same ? "the same as" : "NOT the same as");
  return worst < 2e-4 && same ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  comm::MpiEnvironment mpi(argc, argv);
  int const gpus = cuda::device_count(), processes = world_size();
  if (gpus < processes) {  // every process of this machine needs a GPU of its own
    if (world_rank() == 0)
      std::printf("SKIPPED: %d processes need %d CUDA devices, this machine has %d; scripts/gpu-check runs this on a "
                  "GPU machine\n", processes, processes, gpus);
    return 77;
  }
  int failed = 0;
  try {
    failed = processes == 1 ? compare<1>() : processes == 2 ? compare<2>() : 2;
  } catch (std::exception const& e) {
    std::printf("rank %d: %s\n", world_rank(), e.what());
    failed = 1;
  }
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
