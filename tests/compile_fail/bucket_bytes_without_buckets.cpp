#include "strata.hpp"
// BucketBytes<B> sizes the buckets of a sync over a Communicator; Mirrored<N> on the CPU
// reads gradients in place and has none, so asking for a size there is an error, not a no-op.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::Mirrored<2>, strata::BucketBytes<1 << 20>>;
#else
using T = strata::Trainer<strata::Mirrored<2>>;
#endif
int main() {
  strata::Dataset data(strata::Matrix::Random(4, 8), std::vector<std::int32_t>(8, 1));
  strata::Sequential<strata::Dense<4, 2>> model(1);
  T trainer;
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 4});
}
