#include "strata.hpp"
// A loss scale must be one of strata's loss-scale choices, not an arbitrary type.
struct MyScale {};
#ifdef STRATA_MUST_FAIL
using P = strata::Precision<strata::fp16, MyScale>;
#else
using P = strata::Precision<strata::fp16, strata::StaticLossScale<1024>>;
#endif
int main() { return P::name().empty() ? 1 : 0; }
