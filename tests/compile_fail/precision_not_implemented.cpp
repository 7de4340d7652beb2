#include "strata.hpp"
// Declaring the trainer compiles (the policies parse); training with a precision that is not built yet must not.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::Mirrored<4>, strata::MixedPrecision, strata::GradAccum<8>>;
#else
using T = strata::Trainer<strata::Mirrored<4>, strata::FullPrecision, strata::GradAccum<8>>;
#endif
int main() {
  strata::Trainer<strata::Mirrored<4>, strata::MixedPrecision, strata::GradAccum<8>> declared;  // the exact spelling compiles
  (void)declared;
  T trainer;
  strata::Sequential<strata::Dense<4, 2>> model;
  strata::Dataset data(strata::Matrix::Zero(4, 8), std::vector<std::int32_t>(8, 1));
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 4});
}
