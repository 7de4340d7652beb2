#pragma once
// strata's bf16 matrix product on AMX (Intel Sapphire Rapids and later): c = alpha * op(a)
// op(b) + beta * c, column-major, bf16 inputs and float sums, on the tile units
// (TDPBF16PS: a 16 x 32 bf16 tile times a 32 x 16 one, summed into 16 x 16 floats).
//
// Why: on AMX the products are a few times faster than any AVX-512 loop, and what is left
// of a product's time is moving its factors into tile order. op(a) (Dense's weights, or dy
// in the weight gradient) is read in the layout of strata's bf16 kernel (core/bf16_gemm.hpp:
// panels of 32 rows, each pair of k's 32 rows' values side by side), which is the order
// TDPBF16PS takes its second factor in, 16 rows at a time: the update writes that packed
// copy of the weights once per step (pack_a_elements) and every product reads it as it is.
// op(b) is laid out here as `rows`: column j of op(b) as one row of k values, zero up to a
// whole tile, the order of TDPBF16PS's first factor.
//
// One 32 x 32 block of c at a time: four accumulator tiles (32 of c's columns by 32 of its
// rows), two tiles of op(b)'s rows and two of a panel of op(a) per 32 of k. The block's
// float sums are stored to the stack, then c = alpha * sums + beta * c for the part that
// lies in c (beta == 0 never reads c). A panel's last pairs, where k is not a whole number of
// tiles, are copied into a zero-padded tile first, so no tile reads past the panel: every
// sum is over the product's own k values, and a value outside it (a NaN in the next panel)
// never reaches c.
//
// Every function here needs available(): the caller asks first.

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "strata/core/bf16_gemm.hpp"
#include "strata/core/dtype.hpp"

#define STRATA_AMX_KERNEL __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace strata::amx_gemm {

inline constexpr int tile_k = 32;        // the k values of one row of a first-factor tile
inline constexpr int block_columns = 32;  // of c: two tiles of op(b)'s rows

// Whether this CPU and this process can use the tile units: the instructions, and Linux's
// leave to use the tile registers' state (asked once per process, ARCH_REQ_XCOMP_PERM).
inline bool available() {
  static bool const usable = [] {
    if (!bf16_gemm::available() || !__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16"))
      return false;
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
  }();
  return usable;
}

// The length of a row of op(b) in `rows` (k rounded up to whole tiles), and the values the
// rows of a k x n op(b) take (n rounded up to a whole block).
// (Plus one cache line, so that the 32 rows a block reads, whose lengths are often powers of
// two, do not all fall into the same few sets of the L1.)
[[nodiscard]] constexpr int row_length(int k) { return (k + tile_k - 1) / tile_k * tile_k; }
[[nodiscard]] constexpr std::size_t rows_size(int k, int n) {
  return std::size_t((n + block_columns - 1) / block_columns * block_columns) * std::size_t(row_length(k));
}

namespace detail {

// 16 values of a row as 16 bf16 words.
template <class T>
STRATA_AMX_KERNEL inline __m256i load_16(T const* x, __mmask16 lanes) {
  if constexpr (std::is_same_v<T, bf16>) {
    return _mm256_maskz_loadu_epi16(lanes, x);
  } else {
    __m256bh const packed = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes, x));
    return reinterpret_cast<__m256i const&>(packed);
  }
}

// Rows [j, j + count) (count <= 16) of a transposed op(b), whose column j is b's row j
// (op(b)(s, j) = data[s * ld + j]): two of k's values at a time, each 32-bit word of the
// pair (s, s + 1) of 16 columns scattered to its row.
template <class T>
STRATA_AMX_KERNEL inline void transpose_16_columns(std::uint16_t* out, bf16_gemm::Factor<T> b, int k, int j, int count,
                                                   int length) {
  __mmask16 const lanes = __mmask16((1u << count) - 1u);
  __m512i const rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(length / 2));  // in 32-bit words
  auto* words = reinterpret_cast<int*>(out + std::size_t(j) * std::size_t(length));
  for (int s = 0; s < k; s += 2) {
    // (maskz with every lane kept: GCC 12's plain widening starts from an "undefined" value it
    // then warns about, bug 105593)
    __m512i const first = _mm512_maskz_cvtepu16_epi32(0xffff, load_16(b.address(s, j), lanes));
    __m512i const second = s + 1 < k ? _mm512_maskz_cvtepu16_epi32(0xffff, load_16(b.address(s + 1, j), lanes))
                                     : _mm512_setzero_si512();
    __m512i const pairs = _mm512_or_si512(first, _mm512_maskz_slli_epi32(0xffff, second, 16));
    _mm512_mask_i32scatter_epi32(words + s / 2, lanes, rows, pairs, 4);
  }
}

}  // namespace detail

// op(b) (k x n) as multiply() reads it: row j = op(b)(0..k-1, j) in bf16, then zeros to
// row_length(k); rows n up to a whole block are zero. `out` holds rows_size(k, n) values.
// Floats are rounded to nearest even, as the bf16 kernel's packing rounds them.
template <class T>
STRATA_AMX_KERNEL void pack_rows(bf16* out, bf16_gemm::Factor<T> b, int k, int n) {
  int const length = row_length(k);
  auto* words = reinterpret_cast<std::uint16_t*>(out);
  std::fill_n(words, rows_size(k, n), std::uint16_t{0});
  if (!b.transposed) {  // a column of op(b) lies in memory: convert it as it is
    for (int j = 0; j < n; ++j) {
      T const* column = b.address(0, j);
      std::uint16_t* row = words + std::size_t(j) * std::size_t(length);
      for (int s = 0; s < k; s += 16) {
        int const count = std::min(16, k - s);
        _mm256_mask_storeu_epi16(row + s, __mmask16((1u << count) - 1u), detail::load_16(column + s, __mmask16((1u << count) - 1u)));
      }
    }
    return;
  }
  for (int j = 0; j < n; j += 16) detail::transpose_16_columns(words, b, k, j, std::min(16, n - j), length);
}

namespace detail {

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14]{};
  std::uint16_t bytes_per_row[16]{};
  std::uint8_t rows[16]{};
};

// Tiles 0-3: the block's sums; 4 and 5: 16 rows of op(b) each; 6 and 7: 16 pairs of k of a
// panel's 16 rows of op(a) each. Every tile is 16 rows of 64 bytes.
STRATA_AMX_KERNEL inline void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.bytes_per_row[t] = 64;
  _tile_loadconfig(&config);
}

// c's columns [0, columns) and rows [0, rows) of a block (leading dimension ldc) =
// alpha * sums + beta * c; sums[j * 32 + i] is the sum for row i of column j.
STRATA_AMX_KERNEL inline void store_block(float const* sums, float alpha, float beta, float* c, int ldc, int rows,
                                          int columns) {
  __mmask16 const low = __mmask16(rows >= 16 ? 0xffffu : (1u << rows) - 1u);
  __mmask16 const high = __mmask16(rows <= 16 ? 0u : rows >= 32 ? 0xffffu : (1u << (rows - 16)) - 1u);
  __m512 const a = _mm512_set1_ps(alpha), b = _mm512_set1_ps(beta);
  for (int j = 0; j < columns; ++j, c += ldc, sums += 32) {
    for (int half = 0; half < 2; ++half) {
      __mmask16 const lanes = half == 0 ? low : high;
      __m512 value = _mm512_mul_ps(a, _mm512_load_ps(sums + 16 * half));
      if (beta != 0.0f) value = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(lanes, c + 16 * half), value);
      _mm512_mask_storeu_ps(c + 16 * half, lanes, value);
    }
  }
}

// The sums of the block (tiles 0-3) += the product of k's values [32 block, 32 block + 32):
// op(b)'s rows from `first` and `second` (16 each, `length` values apart) by the 16 pairs of a
// panel at `pairs_of_a`.
STRATA_AMX_KERNEL inline void accumulate(std::uint16_t const* first, std::uint16_t const* second, int length, int block,
                                         std::uint16_t const* pairs_of_a) {
  // Tiles are not renamed: a load waits for the products that read the tile before, so each
  // load comes just before the first product that needs it, and a product can start while
  // the next tile loads (the order of oneDNN's brgemm kernels).
  constexpr long panel_bytes_per_pair = 4 * bf16_gemm::panel_rows;
  _tile_loadd(4, first + std::size_t(block) * tile_k, long(length) * 2);
  _tile_loadd(6, pairs_of_a, panel_bytes_per_pair);  // the panel's rows 0-15
  _tile_dpbf16ps(0, 4, 6);
  _tile_loadd(7, pairs_of_a + 32, panel_bytes_per_pair);  // and 16-31
  _tile_dpbf16ps(1, 4, 7);
  _tile_loadd(5, second + std::size_t(block) * tile_k, long(length) * 2);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

}  // namespace detail

// c (m x n, leading dimension ldc) = alpha * op(a) op(b) + beta * c, with op(a) (m x k)
// packed as bf16_gemm::pack_a packs it and op(b) (k x n) laid out by pack_rows.
STRATA_AMX_KERNEL inline void multiply(bf16 const* packed_a, bf16 const* rows, int m, int n, int k, float alpha,
                                       float beta, float* c, int ldc) {
  using bf16_gemm::panel_rows;
  int const pairs = bf16_gemm::pairs(k), whole = pairs / 16, left = pairs % 16, length = row_length(k);
  std::size_t const panel_values = std::size_t(pairs) * 2 * panel_rows;
  alignas(64) std::uint16_t last[16 * 2 * panel_rows];  // a panel's last `left` pairs, zero past them
  alignas(64) float sums[32 * 32];
  detail::configure_tiles();
  for (int row = 0; row < m; row += panel_rows) {
    auto const* panel = reinterpret_cast<std::uint16_t const*>(packed_a) + std::size_t(row / panel_rows) * panel_values;
    if (left > 0) {
      std::memset(last, 0, sizeof last);
      std::memcpy(last, panel + std::size_t(whole) * 16 * 2 * panel_rows, std::size_t(left) * 2 * panel_rows * 2);
    }
    for (int column = 0; column < n; column += block_columns) {
      auto const* first = reinterpret_cast<std::uint16_t const*>(rows) + std::size_t(column) * std::size_t(length);
      auto const* second = first + std::size_t(16) * std::size_t(length);
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int block = 0; block < whole; ++block)
        detail::accumulate(first, second, length, block, panel + std::size_t(block) * 16 * 2 * panel_rows);
      if (left > 0) detail::accumulate(first, second, length, whole, last);
      _tile_stored(0, sums, 128);
      _tile_stored(1, sums + 16, 128);
      _tile_stored(2, sums + 16 * 32, 128);
      _tile_stored(3, sums + 16 * 32 + 16, 128);
      detail::store_block(sums, alpha, beta, c + std::size_t(column) * std::size_t(ldc) + std::size_t(row), ldc,
                          std::min(panel_rows, m - row), std::min(block_columns, n - column));
    }
  }
  _tile_release();
}

}  // namespace strata::amx_gemm
