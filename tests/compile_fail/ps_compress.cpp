#include "strata.hpp"
#include "strata/ps.hpp"
// ParameterServer's pushes and pulls travel in fp32: Compress<T> is not built there, and says so.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::ParameterServer<2, 1>, strata::Compress<strata::bf16>>;
#else
using T = strata::Trainer<strata::ParameterServer<2, 1>>;
#endif
int main() {
  T trainer;
  return trainer.num_replicas_in_sync();
}
