#include "strata.hpp"
// evaluate and predict have no epochs or logs: only callbacks that read a profile (on_profile) are taken.
int main() {
  strata::Sequential<strata::Dense<4, 2>> const model(1);
  strata::Trainer<strata::OneDevice> trainer;
  strata::Dataset const data(strata::Matrix::Zero(4, 8), strata::Matrix::Zero(2, 8));
#ifdef STRATA_MUST_FAIL
  trainer.evaluate(model, strata::MeanSquaredError{}, data, 4, strata::ProgressBar{});
#else
  trainer.evaluate(model, strata::MeanSquaredError{}, data, 4, strata::Profiler{{.summary = false}});
#endif
}
