#include "strata.hpp"
#include "strata/ps.hpp"
// No probe times a ParameterServer run yet: a Profiler there would print an empty summary, so it does not compile.
int main() {
  strata::Sequential<strata::Dense<4, 2>> model(1);
  strata::Trainer<strata::ParameterServer<2, 1>> trainer;
  strata::Dataset const data(strata::Matrix(4, 8), strata::Matrix(2, 8));
#ifdef STRATA_MUST_FAIL
  trainer.fit(model, strata::Sgd{}, strata::MeanSquaredError{}, data, {}, strata::Profiler{});
#else
  trainer.fit(model, strata::Sgd{}, strata::MeanSquaredError{}, data, {}, strata::ProgressBar{});
#endif
}
