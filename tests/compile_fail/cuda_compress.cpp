#include "strata.hpp"
#include "strata/cuda.hpp"
// Gradients cross GPUs in fp32: Compress<T> is not built on Cuda, and says so.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::Mirrored<2>, strata::Cuda, strata::Compress<strata::bf16>>;
#else
using T = strata::Trainer<strata::Mirrored<2>, strata::Cuda>;
#endif
int main() {
  strata::Dataset data(strata::Matrix::Random(4, 8), std::vector<std::int32_t>(8, 1));
  strata::Sequential<strata::Dense<4, 2>> model(1);
  T trainer;
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 4});
}
