#include "strata.hpp"
// Compress<T> takes a 16-bit type; fp32 on the wire is NoCompression, the default.
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::OneDevice, strata::Compress<float>>;
#else
using T = strata::Trainer<strata::OneDevice, strata::NoCompression>;
#endif
int main() {
  T trainer;
  return trainer.num_replicas_in_sync();
}
