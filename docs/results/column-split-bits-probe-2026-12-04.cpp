// Do a product's per-column bits depend on how its output columns are split? The step's
// Dense<784, 1024> weight gradient (c = a b^T, 1024 x 784, inner 256) whole, then in 2, 8, 16
// and 98 column blocks, in fp32 and under a bf16 products binding. Built outside the tree:
//   g++ -DSTRATA_DNNL -Iinclude -isystem /usr/include/eigen3 -O3 -march=native -std=gnu++20 F -ldnnl -lgomp
//   g++ -Iinclude -isystem /usr/include/eigen3 -O3 -march=native -std=gnu++20 F
#include <cstdio>
#include <cstring>
#include <vector>
#include <strata.hpp>
using namespace strata;
int main() {
  Rng rng(3);
  int const m = 1024, n = 784, k = 256;
  Matrix a(m, k), b(n, k);  // c = a b^T: Dense<784,1024>'s weight gradient dy x^T
  for (int i = 0; i < a.size(); ++i) a.data()[i] = rng.uniform() - 0.5f;
  for (int i = 0; i < b.size(); ++i) b.data()[i] = rng.uniform() - 0.5f;
  for (bool bf : {false, true}) {
    Bf16ProductsBinding const bind(bf);
    Matrix whole(m, n);
    CpuBackend::gemm(Transpose::no, Transpose::yes, 1.0f, view(a), view(b), 0.0f, view(whole));
    for (int parts : {2, 8, 16, 98}) {
      Matrix c(m, n);
      for (int p = 0; p < parts; ++p) {
        auto [first, count] = split_columns(n, parts, p);
        Matrix bp = b.middleRows(first, count);  // columns [first, first + count) of c = a * (those rows of b)^T
        MatrixView cv = view(c).columns(first, count);
        CpuBackend::gemm(Transpose::no, Transpose::yes, 1.0f, view(a), view(bp), 0.0f, cv);
      }
      bool same = std::memcmp(c.data(), whole.data(), sizeof(float) * c.size()) == 0;
      std::printf("%s parts %d: %s (max diff %g)\n", bf ? "bf16" : "fp32", parts, same ? "same bits" : "DIFFERENT", (c - whole).cwiseAbs().maxCoeff());
    }
  }
}
