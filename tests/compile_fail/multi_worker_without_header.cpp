#include "strata.hpp"
// MultiWorkerMirrored runs over MPI, which only strata/multi_worker.hpp brings in: without
// it the trainer says which header and which CMake target are missing.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::MultiWorkerMirrored<2>>;
#else
using T = strata::Trainer<strata::Mirrored<2>>;
#endif
int main() {
  strata::Dataset data(strata::Matrix::Random(4, 8), std::vector<std::int32_t>(8, 1));
  strata::Sequential<strata::Dense<4, 2>> model(1);
  T trainer;
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 4});
}
