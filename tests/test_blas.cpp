// strata::blas: Eigen's products through OpenBLAS. Built only when the target exists; the
// layer tests that do GEMMs (core, nn, trainer) are also built against it (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "random_matrix.hpp"
#include "strata.hpp"

using namespace strata;

TEST_CASE("the program runs OpenBLAS, one thread per call") {
  CHECK(cpu_gemm_engine().find("OpenBLAS") == 0);
  CHECK(openblas_get_num_threads() == 1);
}

TEST_CASE("replica threads can call the GEMM at once: each result equals the same call made alone") {
  Rng rng(11);
  auto random = [&](int r, int c) { return random_matrix(rng, r, c); };
  constexpr int threads = 4;
  std::vector<Matrix> a, b, expected;
  for (int t = 0; t < threads; ++t) {
    a.push_back(random(256, 300 + t));
    b.push_back(random(300 + t, 96));
    expected.push_back(Matrix::Zero(256, 96));
    CpuBackend::gemm(Transpose::no, Transpose::no, 1.0f, view(a[t]), view(b[t]), 0.0f, view(expected[t]));
  }
  std::vector<int> mismatches(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      Matrix c(256, 96);
      for (int repeat = 0; repeat < 200; ++repeat) {
        CpuBackend::gemm(Transpose::no, Transpose::no, 1.0f, view(a[t]), view(b[t]), 0.0f, view(c));
        mismatches[t] += !(c == expected[t]);
      }
    });
  for (auto& thread : pool) thread.join();
  for (int t = 0; t < threads; ++t) CHECK(mismatches[t] == 0);
}
