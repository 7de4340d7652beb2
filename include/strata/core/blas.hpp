#pragma once
// Which GEMM the CPU backend runs: Eigen's own kernels, OpenBLAS behind Eigen's products
// when the program links the strata::blas target, or oneDNN when it links strata::dnnl
// (core/dnnl.hpp). strata::blas defines EIGEN_USE_BLAS and STRATA_OPENBLAS for every
// translation unit, which Eigen requires.
//
// Replicas are strata's threads, so each GEMM runs on the thread that calls it: OpenBLAS's
// own thread pool would oversubscribe the cores. strata therefore sets OpenBLAS to one
// thread, once, before main, in any program that includes it with STRATA_OPENBLAS.

#include <string>

#if defined(STRATA_OPENBLAS)
extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}
#endif

namespace strata {

#if defined(STRATA_OPENBLAS)
#if !defined(EIGEN_USE_BLAS)
#error "STRATA_OPENBLAS without EIGEN_USE_BLAS: link the strata::blas target instead of defining it by hand"
#endif
namespace detail {
inline bool const openblas_on_calling_thread = (openblas_set_num_threads(1), true);
}  // namespace detail

#endif

#if defined(STRATA_DNNL)
// oneDNN runs the products: core/dnnl.hpp defines cpu_gemm_engine().
#elif defined(STRATA_OPENBLAS)
// "OpenBLAS 0.3.21, Zen kernels": the version and the kernels picked for this CPU.
inline std::string cpu_gemm_engine() {
  std::string const config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  auto const version_end = config.find(' ', config.find(' ') + 1);
  return config.substr(0, version_end) + ", " + openblas_get_corename() + " kernels";
}
#elif defined(EIGEN_USE_BLAS)
// EIGEN_USE_BLAS defined by hand: some BLAS library runs the products, at its own thread count.
inline std::string cpu_gemm_engine() { return "a BLAS library (EIGEN_USE_BLAS without strata::blas)"; }
#else
inline std::string cpu_gemm_engine() { return "Eigen"; }
#endif

}  // namespace strata
