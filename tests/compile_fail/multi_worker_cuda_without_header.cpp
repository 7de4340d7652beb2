#include "strata.hpp"
#include "strata/cuda.hpp"
#include "strata/multi_worker.hpp"
// MultiWorkerMirrored on Cuda needs both MPI and NCCL, which strata/multi_worker_cuda.hpp
// brings together: with only strata/cuda.hpp and strata/multi_worker.hpp, the trainer says so.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::MultiWorkerMirrored<1>, strata::Cuda>;
#else
using T = strata::Trainer<strata::Mirrored<1>, strata::Cuda>;
#endif
int main() {
  strata::Dataset data(strata::Matrix::Random(4, 8), std::vector<std::int32_t>(8, 1));
  strata::Sequential<strata::Dense<4, 2>> model(1);
  T trainer;
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 4});
}
