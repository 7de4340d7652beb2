#include "strata.hpp"
// ParameterServer trains through Trainer once strata/ps.hpp is included; it has no Strategy
// for custom loops (its coordinator schedules steps instead).
#ifdef STRATA_MUST_FAIL
strata::Strategy<strata::ParameterServer<2, 1>> strategy;
#else
strata::Strategy<strata::Mirrored<2>> strategy;
#endif
int main() { return strategy.num_replicas_in_sync(); }
