#include "strata.hpp"
#include "strata/cuda.hpp"
// A user's own optimizer runs on the CPU; it has no device update, and Trainer<Cuda> must say so.
struct MySgd : strata::Sgd {
  static constexpr char const* name = "MySgd";
};
#ifdef STRATA_MUST_FAIL
using Opt = MySgd;
#else
using Opt = strata::Lamb;
#endif
int main() {
  strata::Trainer<strata::Mirrored<2>, strata::Cuda> trainer;
  strata::Sequential<strata::Dense<4, 2>> model;
  strata::Dataset data(strata::Matrix::Zero(4, 8), std::vector<std::int32_t>(8, 1));
  trainer.fit(model, Opt{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 4});
}
