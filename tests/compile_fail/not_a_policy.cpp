#include "strata.hpp"
#ifdef STRATA_MUST_FAIL
using S = strata::Strategy<strata::Mirrored<2>, int>;
#else
using S = strata::Strategy<strata::Mirrored<2>>;
#endif
int main() { return S::num_replicas; }
