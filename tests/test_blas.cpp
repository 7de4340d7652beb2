// strata::blas: Eigen's products through OpenBLAS. Built only when the target exists; the
// layer tests that do GEMMs (core, nn, trainer) are also built against it (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <string>

#include "concurrent_gemm.hpp"
#include "strata.hpp"

using namespace strata;

TEST_CASE("the program runs OpenBLAS, one thread per call") {
  CHECK(cpu_gemm_engine().find("OpenBLAS") == 0);
  CHECK(openblas_get_num_threads() == 1);
}

TEST_CASE("the engine line says when OpenBLAS's kernels leave out the CPU's AVX2, and how to pick faster ones") {
  // Debian 12's OpenBLAS on Intel Emerald Rapids picks "Prescott" (SSE3).
  CHECK(openblas_kernel_note("Prescott", true, true).find("OPENBLAS_CORETYPE=SkylakeX") != std::string::npos);
  CHECK(openblas_kernel_note("Nehalem", true, false).find("OPENBLAS_CORETYPE=Haswell") != std::string::npos);
  CHECK(openblas_kernel_note("Sandybridge", true, false).find("strata::dnnl") != std::string::npos);
  for (char const* wide : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Excavator"})
    CHECK(openblas_kernel_note(wide, true, true).empty());
  CHECK(openblas_kernel_note("Prescott", false, false).empty());  // a CPU without AVX2: nothing faster to pick
  // This machine's own line carries the note exactly when its kernels leave out its AVX2.
  std::string const core = openblas_get_corename();
  bool const narrow = !openblas_kernel_note(core, __builtin_cpu_supports("avx2"), __builtin_cpu_supports("avx512f")).empty();
  CHECK((cpu_gemm_engine().find("OPENBLAS_CORETYPE") != std::string::npos) == narrow);
  MESSAGE("engine: " << cpu_gemm_engine());
}

TEST_CASE("replica threads can call the GEMM at once: each result equals the same call made alone") {
  for (int mismatches : concurrent_gemm_mismatches(4, 200, [](int) { return 0; })) CHECK(mismatches == 0);
}
