#include "strata.hpp"
// Compress<T> rounds the gradients that cross a wire; Mirrored<N> on the CPU reads its
// replicas' gradients in place, so asking for compression there is an error, not a no-op.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::Mirrored<4>, strata::MixedPrecision, strata::Compress<strata::bf16>>;
#else
using T = strata::Trainer<strata::Mirrored<4>, strata::MixedPrecision>;
#endif
int main() {
  T trainer;
  strata::Sequential<strata::Dense<4, 2>> model;
  strata::Dataset data(strata::Matrix::Zero(4, 8), std::vector<std::int32_t>(8, 1));
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 4});
}
