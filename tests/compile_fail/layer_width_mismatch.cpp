#include "strata.hpp"
#ifdef STRATA_MUST_FAIL
using Model = strata::Sequential<strata::Dense<784, 512>, strata::Relu, strata::Dense<256, 10>>;
#else
using Model = strata::Sequential<strata::Dense<784, 512>, strata::Relu, strata::Dense<512, 10>>;
#endif
int main() { return Model::output_width == 10 ? 0 : 1; }
