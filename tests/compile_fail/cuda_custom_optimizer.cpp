#include "strata.hpp"
#include "strata/cuda.hpp"
// A user's optimizer with only a CPU update (no element rule) runs on the CPU; Trainer<Cuda>
// must say how to give it one. The same optimizer with a rule compiles.
#ifdef STRATA_MUST_FAIL
struct MySgd : strata::Sgd {
  static constexpr char const* name = "MySgd";
  int rule(strata::StepInfo) const { return 0; }  // hides Sgd's: no element rule left
};
#else
struct MySgd : strata::Sgd {
  static constexpr char const* name = "MySgd";
};
#endif
int main() {
  strata::Trainer<strata::Mirrored<2>, strata::Cuda> trainer;
  strata::Sequential<strata::Dense<4, 2>> model;
  strata::Dataset data(strata::Matrix::Zero(4, 8), std::vector<std::int32_t>(8, 1));
  trainer.fit(model, MySgd{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 4});
}
