#include "strata.hpp"
#ifdef STRATA_MUST_FAIL
strata::Strategy<strata::Cuda> strategy;
#else
strata::Strategy<strata::Cpu> strategy;
#endif
int main() { return strategy.num_replicas_in_sync(); }
