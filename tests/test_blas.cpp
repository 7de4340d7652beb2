// strata::blas: Eigen's products through OpenBLAS. Built only when the target exists; the
// layer tests that do GEMMs (core, nn, trainer) are also built against it (tests/CMakeLists.txt).
// Built with strata::dnnl too (blas.dnnl_openblas), it checks which float products OpenBLAS
// multiplies beside oneDNN.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "concurrent_gemm.hpp"
#include "strata.hpp"

using namespace strata;

TEST_CASE("the program runs OpenBLAS, one thread per call") {
#if defined(STRATA_DNNL)
  CHECK(cpu_gemm_engine().find("oneDNN") == 0);  // with OpenBLAS beside it (below)
  CHECK(cpu_gemm_engine().find("; OpenBLAS") != std::string::npos);
#else
  CHECK(cpu_gemm_engine().find("OpenBLAS") == 0);
#endif
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
#if defined(STRATA_DNNL)
  if (narrow) CHECK(cpu_gemm_engine().find("OpenBLAS linked, unused on this CPU") != std::string::npos);
#else
  CHECK((cpu_gemm_engine().find("OPENBLAS_CORETYPE") != std::string::npos) == narrow);
#endif
  MESSAGE("engine: " << cpu_gemm_engine());
}

TEST_CASE("replica threads can call the GEMM at once: each result equals the same call made alone") {
  for (int mismatches : concurrent_gemm_mismatches(4, 200, [](int) { return 0; })) CHECK(mismatches == 0);
}

#if defined(STRATA_DNNL)
TEST_CASE("beside oneDNN, OpenBLAS multiplies the float products oneDNN's AVX2 kernels run slowly, and no others") {
  // The rule: a itself (not transposed), rows a multiple of 512, at most 256 output columns, inner >= 64.
  CHECK(detail::dnnl_avx2_slow_float_product(false, 1024, 784, 128));  // the anchor MLP's first forward
  CHECK(detail::dnnl_avx2_slow_float_product(false, 512, 64, 256));
  CHECK(detail::dnnl_avx2_slow_float_product(false, 1536, 512, 1));
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(true, 1024, 1024, 128));  // an input gradient
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 1000, 784, 128));  // 1,000 rows run at full speed
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 256, 784, 64));    // the flagship's first forward
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 1024, 128, 257));  // wider than 256 columns
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 1024, 63, 128));   // a tiny inner dimension
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 0, 64, 64));

  // This process: the engine line names OpenBLAS's share exactly where it takes one.
  bool const beside = detail::openblas_beside_dnnl();
  std::string const engine = cpu_gemm_engine();
  CHECK((engine.find("for the float products of 512k-row weights") != std::string::npos) == beside);
  CHECK((engine.find("OpenBLAS linked, unused on this CPU") != std::string::npos) == !beside);
  MESSAGE("engine: " << engine);

  // CpuBackend::gemm, whole and split over an intra-op team of 2, against an exact sum, and
  // bit for bit against the engine the rule names for each part.
  Rng rng(17);
  comm::ThreadGroup team_threads(2);
  IntraOpTeam const team = team_threads.intra_op_team();
  int routed = 0;
  for (IntraOpTeam const* bound : {static_cast<IntraOpTeam const*>(nullptr), &team})
    for (auto ta : {Transpose::no, Transpose::yes})
      for (auto tb : {Transpose::no, Transpose::yes})
        for (float beta : {0.0f, 0.5f})
          for (auto [m, n, k] : {std::array{1024, 96, 200}, std::array{512, 512, 64}, std::array{1000, 96, 200},
                                 std::array{1024, 96, 40}}) {
            IntraOpBinding const binding(bound);
            Matrix const a = ta == Transpose::no ? random_matrix(rng, m, k) : random_matrix(rng, k, m);
            Matrix const b = tb == Transpose::no ? random_matrix(rng, k, n) : random_matrix(rng, n, k);
            Matrix const c0 = random_matrix(rng, m, n);
            Matrix got = c0, direct = c0;
            CpuBackend::gemm(ta, tb, 2.0f, view(a), view(b), beta, view(got));
            int const parts = CpuBackend::split_parts(m, n, k);
            for (int p = 0; p < parts; ++p) {
              auto const [first, count] = split_columns(n, parts, p);
              bool const trans_a = ta == Transpose::yes, trans_b = tb == Transpose::yes;
              if (beside && detail::dnnl_avx2_slow_float_product(trans_a, int(a.rows()), k, count)) {
                ++routed;
                detail::openblas_float_gemm(trans_a, trans_b, 2.0f, view(a), view(b), beta, view(direct), first, count);
              } else {
                detail::dnnl_float_gemm(trans_a, trans_b, 2.0f, view(a), view(b), beta, view(direct), first, count);
              }
            }
            CHECK(got == direct);
            double worst = 0;  // |error| over (k + 2) float roundings of the sum of |terms|
            for (int j = 0; j < n; ++j)
              for (int i = 0; i < m; ++i) {
                double s = 0, magnitude = 0;
                for (int q = 0; q < k; ++q) {
                  double const t = double(ta == Transpose::no ? a(i, q) : a(q, i)) *
                                   double(tb == Transpose::no ? b(q, j) : b(j, q));
                  s += t;
                  magnitude += std::abs(t);
                }
                double const exact = 2.0 * s + double(beta) * double(c0(i, j));
                double const tolerance = (k + 2) * 0x1p-24 * (2.0 * magnitude + std::abs(double(beta) * double(c0(i, j))));
                worst = std::max(worst, std::abs(double(got(i, j)) - exact) / (tolerance + 1e-30));
              }
            CHECK(worst <= 1.0);
          }
  // On a CPU where OpenBLAS takes its share, the rule sent it parts of the 1024- and 512-row products.
  CHECK((routed > 0) == beside);
}
#endif
