// (No include guard: included at the start of each region it opens, as Eigen's
// DisableStupidWarnings.h is; gcc_avx512_warnings_on.hpp closes the region.)
//
// GCC 12's AVX-512 intrinsics start some packets from a deliberately uninitialized value
// (`_mm512_undefined_ps`), so under -march with AVX-512 (Zen 4, x86-64-v4) at -O2 and above
// it reports "'__Y' may be used uninitialized" (or "is used uninitialized") inside Eigen's
// GEMM, max, exp and tanh (GCC bug 105593, fixed in GCC 13). GCC judges such a warning by
// the pragmas in force at each place of its inlining chain, so Eigen included inside such a
// region (core/eigen.hpp), and strata code calling those packets inside one, never report it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
