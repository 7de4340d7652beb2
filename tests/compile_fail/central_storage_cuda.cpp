#include "strata.hpp"
#include "strata/cuda.hpp"
// CentralStorage<N> on Cuda (variables on the host, GPUs computing) is not built yet; on the
// CPU it runs.
#ifdef STRATA_MUST_FAIL
strata::Strategy<strata::CentralStorage<2>, strata::Cuda> strategy;
#else
strata::Strategy<strata::CentralStorage<2>> strategy;
#endif
int main() { return strategy.num_replicas_in_sync(); }
