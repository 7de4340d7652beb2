#pragma once
// The GEMM engines' thread-safety check: `threads` threads each repeat their own product
// `repeats` times, all at once; each result must equal the same call made alone. `bind(t)`
// returns what thread t holds while it multiplies (e.g. a Bf16ProductsBinding), for the
// lone call and on the thread alike.
#include <thread>
#include <vector>

#include "random_matrix.hpp"

// How many of thread t's repeated results differed from its lone result, per thread.
template <class Bind>
std::vector<int> concurrent_gemm_mismatches(int threads, int repeats, Bind bind) {
  using namespace strata;
  Rng rng(11);
  std::vector<Matrix> a, b, expected;
  for (int t = 0; t < threads; ++t) {
    a.push_back(random_matrix(rng, 256, 300 + t));
    b.push_back(random_matrix(rng, 300 + t, 96));
    expected.push_back(Matrix::Zero(256, 96));
    [[maybe_unused]] auto const binding = bind(t);
    CpuBackend::gemm(Transpose::no, Transpose::no, 1.0f, view(a[t]), view(b[t]), 0.0f, view(expected[t]));
  }
  std::vector<int> mismatches(std::size_t(threads), 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      [[maybe_unused]] auto const binding = bind(t);
      Matrix c(256, 96);
      for (int repeat = 0; repeat < repeats; ++repeat) {
        CpuBackend::gemm(Transpose::no, Transpose::no, 1.0f, view(a[t]), view(b[t]), 0.0f, view(c));
        mismatches[std::size_t(t)] += !(c == expected[t]);
      }
    });
  for (auto& thread : pool) thread.join();
  return mismatches;
}
