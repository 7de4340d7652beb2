// strata::blas: Eigen's products through OpenBLAS. Built only when the target exists; the
// layer tests that do GEMMs (core, nn, trainer) are also built against it (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include "concurrent_gemm.hpp"
#include "strata.hpp"

using namespace strata;

TEST_CASE("the program runs OpenBLAS, one thread per call") {
  CHECK(cpu_gemm_engine().find("OpenBLAS") == 0);
  CHECK(openblas_get_num_threads() == 1);
}

TEST_CASE("replica threads can call the GEMM at once: each result equals the same call made alone") {
  for (int mismatches : concurrent_gemm_mismatches(4, 200, [](int) { return 0; })) CHECK(mismatches == 0);
}
