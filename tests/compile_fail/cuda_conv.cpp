#include "strata.hpp"
#include "strata/cuda.hpp"
// The image layers have host loops only: a Cuda trainer must refuse them by name. The same
// model without them compiles.
#ifdef STRATA_MUST_FAIL
using Model = strata::Sequential<strata::Conv2D<strata::ImageShape{4, 4, 1}, 2, 3>, strata::Dense<8, 2>>;
#else
using Model = strata::Sequential<strata::Dense<16, 8>, strata::Dense<8, 2>>;
#endif
int main() {
  strata::Trainer<strata::OneDevice, strata::Cuda> trainer;
  Model model;
  strata::Dataset data(strata::Matrix::Zero(16, 8), std::vector<std::int32_t>(8, 1));
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 4});
}
