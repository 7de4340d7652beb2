#include "strata.hpp"
#ifdef STRATA_MUST_FAIL
using Model = strata::Sequential<strata::Relu, strata::Dense<784, 10>>;
#else
using Model = strata::Sequential<strata::Dense<784, 10>, strata::Relu>;
#endif
int main() { return Model::input_width == 784 ? 0 : 1; }
