#include "strata.hpp"
struct NotACallback {};
int main() {
  strata::Trainer<> trainer;
  strata::Sequential<strata::Dense<4, 2>> model;
  strata::Dataset data(strata::Matrix::Zero(4, 8), std::vector<std::int32_t>(8, 1));
#ifdef STRATA_MUST_FAIL
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 4}, NotACallback{});
#else
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 4}, strata::EarlyStopping{.monitor = "loss"});
#endif
}
