#include "strata.hpp"
#include "strata/ps.hpp"
// ParameterServer's workers compute in any precision without a loss scale; one with a loss
// scale (MixedPrecisionFp16) would need every worker to skip the same steps, and says so.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::ParameterServer<2, 1>, strata::MixedPrecisionFp16>;
#else
using T = strata::Trainer<strata::ParameterServer<2, 1>, strata::MixedPrecision>;
#endif
int main() {
  T trainer;
  return trainer.num_replicas_in_sync();
}
