#include "strata.hpp"
// A skip connection adds the block's input to its output: a block that changes the width
// cannot be one.
#ifdef STRATA_MUST_FAIL
using Block = strata::Sequential<strata::Dense<8, 16>, strata::Gelu, strata::Dense<16, 4>>;
#else
using Block = strata::Sequential<strata::Dense<8, 16>, strata::Gelu, strata::Dense<16, 8>>;
#endif
int main() {
  strata::Sequential<strata::Residual<Block>, strata::Dense<8, 2>> model(1);
  return model.parameters().empty() ? 1 : 0;
}
