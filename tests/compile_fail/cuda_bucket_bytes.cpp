#include "strata.hpp"
#include "strata/cuda.hpp"
// On Cuda, OneDevice and Mirrored<N> sum gradients in one kernel or one NCCL reduce-scatter
// per step, with no buckets to size: BucketBytes<B> is an error there, not a no-op.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::Mirrored<2>, strata::Cuda, strata::BucketBytes<1 << 20>>;
#else
using T = strata::Trainer<strata::Mirrored<2>, strata::Cuda>;
#endif
int main() {
  strata::Dataset data(strata::Matrix::Random(4, 8), std::vector<std::int32_t>(8, 1));
  strata::Sequential<strata::Dense<4, 2>> model(1);
  T trainer;
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 4});
}
