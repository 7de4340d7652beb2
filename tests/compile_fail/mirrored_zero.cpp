#include "strata.hpp"
#ifdef STRATA_MUST_FAIL
using S = strata::Strategy<strata::Mirrored<0>>;
#else
using S = strata::Strategy<strata::Mirrored<1>>;
#endif
int main() { return S::num_replicas; }
