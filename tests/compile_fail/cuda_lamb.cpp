#include "strata.hpp"
#include "strata/cuda.hpp"
// Lamb's layer-wise trust ratio has no device update yet: Trainer<Cuda> with Lamb must say so.
#ifdef STRATA_MUST_FAIL
using Opt = strata::Lamb;
#else
using Opt = strata::AdamW;
#endif
int main() {
  strata::Trainer<strata::Mirrored<2>, strata::Cuda> trainer;
  strata::Sequential<strata::Dense<4, 2>> model;
  strata::Dataset data(strata::Matrix::Zero(4, 8), std::vector<std::int32_t>(8, 1));
  trainer.fit(model, Opt{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 4});
}
