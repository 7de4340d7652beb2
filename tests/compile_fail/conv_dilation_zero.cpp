#include "strata.hpp"
// A convolution's dilation is the distance between its taps, at least one pixel; the message
// names the parameter. The twin dilates by 2.
#ifdef STRATA_MUST_FAIL
using Conv = strata::Conv2D<strata::ImageShape{8, 8, 1}, 2, 3, strata::Padding::same, 1, 0>;
#else
using Conv = strata::Conv2D<strata::ImageShape{8, 8, 1}, 2, 3, strata::Padding::same, 1, 2>;
#endif
int main() { return Conv::output_shape.height; }
