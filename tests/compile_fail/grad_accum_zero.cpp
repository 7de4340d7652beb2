#include "strata.hpp"
#ifdef STRATA_MUST_FAIL
using T = strata::Trainer<strata::GradAccum<0>>;
#else
using T = strata::Trainer<strata::GradAccum<1>>;
#endif
int main() { return T::config::accumulation_steps; }
