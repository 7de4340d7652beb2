#include "strata.hpp"
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::GradAccum<2>, strata::Mirrored<2>, strata::GradAccum<4>>;
#else
using T = strata::Trainer<strata::GradAccum<2>, strata::Mirrored<2>>;
#endif
int main() { return T::config::accumulation_steps; }
