#include "strata.hpp"
// A convolution's stride must be a whole step of at least one pixel; the message names the
// parameter. The twin has stride 2.
#ifdef STRATA_MUST_FAIL
using Conv = strata::Conv2D<strata::ImageShape{8, 8, 1}, 2, 3, strata::Padding::same, 0>;
#else
using Conv = strata::Conv2D<strata::ImageShape{8, 8, 1}, 2, 3, strata::Padding::same, 2>;
#endif
int main() { return Conv::output_shape.height; }
