#include "strata.hpp"
#include "strata/cuda.hpp"
// CentralStorage<N> on Cuda copies each replica's gradients to the host in one piece per step:
// BucketBytes<B> is an error there, not a no-op. Its twin trains with an optimizer that has
// no element rule, which Mirrored<N> on Cuda refuses (tests/compile_fail/cuda_custom_optimizer.cpp):
// CentralStorage updates on the host, so any optimizer runs.
struct CpuOnlySgd : strata::Sgd {
  static constexpr char const* name = "CpuOnlySgd";
  int rule(strata::StepInfo) const { return 0; }  // hides Sgd's: no element rule left
};
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::CentralStorage<2>, strata::Cuda, strata::BucketBytes<1 << 20>>;
#else
using T = strata::Trainer<strata::CentralStorage<2>, strata::Cuda>;
#endif
int main() {
  strata::Dataset data(strata::Matrix::Random(4, 8), std::vector<std::int32_t>(8, 1));
  strata::Sequential<strata::Dense<4, 2>> model(1);
  T trainer;
  trainer.fit(model, CpuOnlySgd{}, strata::SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 4});
}
