#pragma once
// Which GEMM the CPU backend runs: Eigen's own kernels, OpenBLAS behind Eigen's products
// when the program links the strata::blas target, or oneDNN when it links strata::dnnl
// (core/dnnl.hpp). strata::blas defines EIGEN_USE_BLAS and STRATA_OPENBLAS for every
// translation unit, which Eigen requires. strata::dnnl links OpenBLAS too where it is
// found (STRATA_DNNL_OPENBLAS, without EIGEN_USE_BLAS), for the few products it hands it.
//
// Replicas are strata's threads, so each GEMM runs on the thread that calls it: OpenBLAS's
// own thread pool would oversubscribe the cores. strata therefore sets OpenBLAS to one
// thread, once, before main, in any program that links it.

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "strata/core/tensor.hpp"

#if defined(STRATA_OPENBLAS) && !defined(EIGEN_USE_BLAS)
#error "STRATA_OPENBLAS without EIGEN_USE_BLAS: link the strata::blas target instead of defining it by hand"
#endif
#if defined(STRATA_OPENBLAS) || defined(STRATA_DNNL_OPENBLAS)
extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
// BLAS's single-precision GEMM, declared exactly as Eigen's blas.h declares it (under
// EIGEN_USE_BLAS both declarations are seen).
int sgemm_(char const*, char const*, int const*, int const*, int const*, float const*, float const*, int const*,
           float const*, int const*, float const*, float*, int const*);
}
#endif

namespace strata {

#if defined(STRATA_OPENBLAS) || defined(STRATA_DNNL_OPENBLAS)
namespace detail {
inline bool const openblas_on_calling_thread = (openblas_set_num_threads(1), true);

// Output columns [first, first + count) of c = alpha * op(a) * op(b) + beta * c on OpenBLAS's
// sgemm, called directly (Eigen's product would scale c by beta in a pass of its own). All
// views are column-major, as BLAS's are.
inline void openblas_float_gemm(bool trans_a, bool trans_b, float alpha, ConstMatrixView a, ConstMatrixView b,
                                float beta, MatrixView c, int first, int count) {
  int const m = c.rows, k = trans_a ? a.rows : a.cols;
  int const lda = std::max(1, a.rows), ldb = std::max(1, b.rows), ldc = std::max(1, c.rows);
  float const* b_part = b.data + (trans_b ? std::size_t(first) : std::size_t(first) * std::size_t(b.rows));
  char const op_a = trans_a ? 'T' : 'N', op_b = trans_b ? 'T' : 'N';
  sgemm_(&op_a, &op_b, &m, &count, &k, &alpha, a.data, &lda, b_part, &ldb, &beta,
         c.data + std::size_t(first) * std::size_t(c.rows), &ldc);
}
}  // namespace detail

#endif

// What to tell a user whose OpenBLAS picked `corename`'s kernels on a CPU with AVX2 (and
// AVX-512): "" where they use those instructions. An OpenBLAS older than the CPU does not
// recognise it and falls back to its SSE3 kernels ("Prescott"): Debian 12's 0.3.21 does so on
// Intel Emerald Rapids, where its products ran 6-8 times slower than with SkylakeX's kernels
// (docs/benchmarks.md). OpenBLAS picks them before main, from OPENBLAS_CORETYPE alone.
[[nodiscard]] inline std::string openblas_kernel_note(std::string_view corename, bool avx2, bool avx512) {
  // OpenBLAS's x86-64 kernels that use AVX2 or AVX-512 (its DYNAMIC_ARCH core names).
  constexpr std::array<std::string_view, 6> wide = {"Haswell",    "Excavator",  "Zen",
                                                    "SkylakeX", "Cooperlake", "SapphireRapids"};
  if (!avx2) return "";
  for (std::string_view const name : wide)
    if (corename == name) return "";
  return std::string(" (this OpenBLAS does not know this CPU and runs kernels without AVX2, several times slower: "
                     "run with OPENBLAS_CORETYPE=") +
         (avx512 ? "SkylakeX" : "Haswell") + ", or link strata::dnnl)";
}

#if defined(STRATA_OPENBLAS) || defined(STRATA_DNNL_OPENBLAS)
// "OpenBLAS 0.3.21, Zen kernels": the version and the kernels picked for this CPU, and a
// hint where they leave out its AVX2.
inline std::string openblas_engine() {
  std::string const config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  auto const version_end = config.find(' ', config.find(' ') + 1);
  std::string const core = openblas_get_corename();
  return config.substr(0, version_end) + ", " + core + " kernels" +
         openblas_kernel_note(core, __builtin_cpu_supports("avx2"), __builtin_cpu_supports("avx512f"));
}
#endif

#if defined(STRATA_DNNL)
// oneDNN runs the products (with OpenBLAS beside it where strata::dnnl found it):
// core/dnnl.hpp defines cpu_gemm_engine().
#elif defined(STRATA_OPENBLAS)
inline std::string cpu_gemm_engine() { return openblas_engine(); }
#elif defined(EIGEN_USE_BLAS)
// EIGEN_USE_BLAS defined by hand: some BLAS library runs the products, at its own thread count.
inline std::string cpu_gemm_engine() { return "a BLAS library (EIGEN_USE_BLAS without strata::blas)"; }
#else
inline std::string cpu_gemm_engine() { return "Eigen"; }
#endif

}  // namespace strata
