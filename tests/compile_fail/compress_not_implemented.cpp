#include "strata.hpp"
// Declaring the trainer compiles (the policies parse); training with gradient compression, not built yet, must not.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::Mirrored<4>, strata::MixedPrecision, strata::Compress<strata::bf16>>;
#else
using T = strata::Trainer<strata::Mirrored<4>, strata::MixedPrecision>;
#endif
int main() {
  strata::Trainer<strata::Mirrored<4>, strata::MixedPrecision, strata::Compress<strata::bf16>> declared;  // compiles
  (void)declared;
  T trainer;
  strata::Sequential<strata::Dense<4, 2>> model;
  strata::Dataset data(strata::Matrix::Zero(4, 8), std::vector<std::int32_t>(8, 1));
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 4});
}
