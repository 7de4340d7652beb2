#pragma once
// Eigen, as strata includes it: inside a region where GCC 12's false AVX-512 warnings are
// off (core/detail/gcc_avx512_warnings_off.hpp says why). A program that includes Eigen
// itself before strata keeps GCC's own behaviour for Eigen's code.

#include "strata/core/detail/gcc_avx512_warnings_off.hpp"
#include <Eigen/Core>
#include "strata/core/detail/gcc_avx512_warnings_on.hpp"
