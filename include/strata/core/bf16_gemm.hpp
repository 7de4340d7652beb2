#pragma once
// strata's own bf16 matrix product for CPUs with AVX512_BF16 (Zen 4 and 5, Intel Cooper Lake and
// later): c = alpha * op(a) op(b) + beta * c, column-major like the rest of core/, with bf16
// inputs and float sums (VDPBF16PS: each float lane adds the products of two bf16 pairs).
//
// Why a kernel of our own beside oneDNN: oneDNN takes its inputs in plain layouts and
// reorders them into the pair-interleaved layout the instruction reads, on every call. A
// training step multiplies the same weights in several products between two updates, so the
// update can write them in that layout once (pack_a_elements) and each product reads them
// as they are; a product's other factor is packed by the product, and a plain bf16 factor
// whose pairs already lie side by side is read where it lies. docs/benchmarks.md ("strata's
// own bf16 kernel") measures it against oneDNN's on the MLP step's products.
//
// The packed layouts (those of BLIS and of oneDNN's brgemm kernels):
//   op(a), m x k: panels of 32 rows (two float registers of results); inside a panel, for
//     each pair of k, the 32 rows' two bf16 values side by side (64 bf16).
//   op(b), k x n: panels of 8 columns; inside a panel, for each pair of k, the 8 columns'
//     two bf16 values side by side (16 bf16).
// Rows past m, columns past n and the partner of an odd k's last value are zero, so the
// kernel runs whole panels and stores only what lies inside c.
// Float inputs are rounded to nearest even while packed, by the CPU's conversion (which
// reads float subnormals as zero), the rounding of round_to_product_bf16 (core/backend.hpp).
//
// Every function here needs available(): the caller asks first.

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "strata/core/dtype.hpp"

// The instructions the kernel's functions are compiled for, whatever -march says. Where an
// intrinsic below has a zero-masked form with every lane kept (maskz, all ones), the plain
// form is what it stands for: GCC 12's plain ones start from an "undefined" value it then
// warns about (bug 105593).
#define STRATA_BF16_KERNEL __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace strata::bf16_gemm {

inline constexpr int panel_rows = 32;    // of op(a)
inline constexpr int panel_columns = 8;  // of op(b)

// Whether this CPU runs the kernel (asked once).
inline bool available() {
  static bool const has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return has;
}

[[nodiscard]] constexpr int pairs(int k) { return (k + 1) / 2; }
[[nodiscard]] constexpr int panels(int extent, int per_panel) { return (extent + per_panel - 1) / per_panel; }

// The bf16 values a packed op(a) of m x k, or a packed op(b) of k x n, takes.
[[nodiscard]] constexpr std::size_t packed_a_size(int m, int k) {
  return std::size_t(panels(m, panel_rows)) * std::size_t(pairs(k)) * 2 * panel_rows;
}
[[nodiscard]] constexpr std::size_t packed_b_size(int k, int n) {
  return std::size_t(panels(n, panel_columns)) * std::size_t(pairs(k)) * 2 * panel_columns;
}
// Where a packing of `per_panel` lines (rows of op(a), columns of op(b)) with inner dimension
// k puts pair p of line j: the word of its first value.
[[nodiscard]] constexpr std::size_t pair_offset(int per_panel, int k, int j, int p) {
  return (std::size_t(j / per_panel) * std::size_t(pairs(k)) + std::size_t(p)) * 2 * std::size_t(per_panel) +
         std::size_t(j % per_panel) * 2;
}

// A factor as the caller holds it: column-major with leading dimension ld, transposed when
// `transposed` (then op(x)(i, j) = x[i * ld + j]). Float or bf16.
template <class T>
struct Factor {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16>);
  T const* data = nullptr;
  int ld = 0;
  bool transposed = false;

  [[nodiscard]] T const* address(int i, int j) const {  // of op(x)(i, j)
    return transposed ? data + std::size_t(i) * std::size_t(ld) + std::size_t(j)
                      : data + std::size_t(j) * std::size_t(ld) + std::size_t(i);
  }
  // op(x) from row i and column j on.
  [[nodiscard]] Factor from(int i, int j) const { return {address(i, j), ld, transposed}; }
  // op(x)^T.
  [[nodiscard]] Factor transpose() const { return {data, ld, !transposed}; }
};

namespace detail {

inline std::uint16_t bits_of(bf16 x) { return x.bits; }
STRATA_BF16_KERNEL inline std::uint16_t bits_of(float x) {
  __m128bh const packed = _mm_cvtneps_pbh(_mm_set_ss(x));
  std::uint16_t bits;
  std::memcpy(&bits, &packed, sizeof bits);
  return bits;
}

// 32 consecutive values as bf16: the 32 words of a 512-bit register.
template <class T>
STRATA_BF16_KERNEL inline __m512i load_32(T const* x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return _mm512_loadu_si512(x);
  } else {
    __m512bh const packed = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
    return reinterpret_cast<__m512i const&>(packed);
  }
}

// The pairs of 32 rows of a factor whose rows are contiguous in memory (op(x) not
// transposed: x0 and x1 are rows 0..31 of two adjacent columns): 64 words, row by row.
template <class T, bool streamed = false>
STRATA_BF16_KERNEL inline void interleave_32(std::uint16_t* out, T const* x0, T const* x1) {
  __m512i const first = load_32(x0), second = load_32(x1);
  // Word i of the result: row i / 2 of `first` (even i) or of `second` (odd i).
  __m512i const low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5,
                                       36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  __m512i const high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
  if constexpr (streamed) {  // past the caches (out 64-byte aligned): see pack_a_elements
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), _mm512_permutex2var_epi16(first, low, second));
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out + 32), _mm512_permutex2var_epi16(first, high, second));
  } else {
    _mm512_storeu_si512(out, _mm512_permutex2var_epi16(first, low, second));
    _mm512_storeu_si512(out + 32, _mm512_permutex2var_epi16(first, high, second));
  }
}

// Pairs 2q and 2q + 1 of 8 rows (one register) where a packing puts them: the rows' pair p
// at out + p * stride (words).
template <int stride>
STRATA_BF16_KERNEL inline void store_two_pairs(std::uint16_t* out, int q, __m512i pairs) {
  if constexpr (stride == 16) {  // side by side: a panel of 8
    _mm512_storeu_si512(out + 32 * q, pairs);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + std::size_t(2 * q) * stride),
                        _mm512_maskz_extracti64x4_epi64(0xf, pairs, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + std::size_t(2 * q + 1) * stride),
                        _mm512_maskz_extracti64x4_epi64(0xf, pairs, 1));
  }
}

// Pairs [p, p + 16) of 8 rows of a factor whose pairs lie side by side in memory (op(x)
// transposed: x[i] is row i's value 2p), each pair's 8 rows at out + p * stride (words;
// 16 in a panel of 8, whose 16 pairs are then 512 contiguous bytes). An 8 x 16 transpose of
// 32-bit pairs in registers: unpacking by 32 and 64 bits within 128-bit lanes, then moving
// lanes.
template <int stride, class T>
STRATA_BF16_KERNEL inline void transpose_8x16_pairs(std::uint16_t* out, T const* const* x) {
  __mmask16 const all16 = 0xffff;
  __mmask8 const all8 = 0xff;
  __m512i r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = load_32(x[i]);
  for (int i = 0; i < 8; i += 2) {  // lane L of t[i]: rows i, i + 1 of pairs 4L, 4L + 1; t[i + 1]: 4L + 2, 4L + 3
    t[i] = _mm512_maskz_unpacklo_epi32(all16, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(all16, r[i], r[i + 1]);
  }
  for (int h = 0; h < 8; h += 4) {  // lane L of u[h + a]: rows h..h+3 of pair 4L + a
    u[h + 0] = _mm512_maskz_unpacklo_epi64(all8, t[h], t[h + 2]);
    u[h + 1] = _mm512_maskz_unpackhi_epi64(all8, t[h], t[h + 2]);
    u[h + 2] = _mm512_maskz_unpacklo_epi64(all8, t[h + 1], t[h + 3]);
    u[h + 3] = _mm512_maskz_unpackhi_epi64(all8, t[h + 1], t[h + 3]);
  }
  for (int a = 0; a < 4; a += 2) {  // pairs 4L + a and 4L + a + 1
    // Lanes 0, 1 (then 2, 3) of each: pair 4L + a's rows 0..3 and 4..7, then pair 4L + a + 1's.
    __m512i const low = _mm512_maskz_shuffle_i32x4(all16, u[a], u[4 + a], 0x44);
    __m512i const high = _mm512_maskz_shuffle_i32x4(all16, u[a], u[4 + a], 0xee);
    __m512i const low1 = _mm512_maskz_shuffle_i32x4(all16, u[a + 1], u[5 + a], 0x44);
    __m512i const high1 = _mm512_maskz_shuffle_i32x4(all16, u[a + 1], u[5 + a], 0xee);
    // Output register q holds pairs 2q and 2q + 1; here 2q = 4L + a for L = 0, 1, 2, 3.
    store_two_pairs<stride>(out, a / 2 + 0, _mm512_maskz_shuffle_i32x4(all16, low, low1, 0x88));
    store_two_pairs<stride>(out, a / 2 + 2, _mm512_maskz_shuffle_i32x4(all16, low, low1, 0xdd));
    store_two_pairs<stride>(out, a / 2 + 4, _mm512_maskz_shuffle_i32x4(all16, high, high1, 0x88));
    store_two_pairs<stride>(out, a / 2 + 6, _mm512_maskz_shuffle_i32x4(all16, high, high1, 0xdd));
  }
}

// `count` words of one pair of op(x): rows [row, row + rows) at pair p, zero past `rows`
// and past k. The general case, for the edges of the fast paths below.
template <class T>
STRATA_BF16_KERNEL void pack_pair(std::uint16_t* out, Factor<T> x, int row, int rows, int count, int p, int k) {
  for (int i = 0; i < count; ++i) {
    bool const inside = i < rows;
    out[2 * i] = inside ? bits_of(*x.address(row + i, 2 * p)) : 0;
    out[2 * i + 1] = inside && 2 * p + 1 < k ? bits_of(*x.address(row + i, 2 * p + 1)) : 0;
  }
}

// Packs rows [0, m) of op(x) (m x k) in panels of `per_panel` rows: panel q's pair p at
// out + (q * pairs(k) + p) * 2 * per_panel.
template <int per_panel, class T>
STRATA_BF16_KERNEL void pack_rows(std::uint16_t* out, Factor<T> x, int m, int k) {
  auto pair_at = [&](int row, int p) { return out + pair_offset(per_panel, k, row, p); };
  int const whole_pairs = k / 2;
  int row = 0;
  if (!x.transposed) {  // 32 rows at a time, two columns of x interleaved
    for (; row + 32 <= m; row += 32)
      for (int p = 0; p < whole_pairs; ++p) {
        std::uint16_t words[64];
        interleave_32(words, x.address(row, 2 * p), x.address(row, 2 * p + 1));
        for (int q = 0; q < 32; q += per_panel) std::memcpy(pair_at(row + q, p), words + 2 * q, 2 * per_panel * 2);
      }
  } else {  // each row's pairs lie side by side: 8 rows x 16 pairs at a time, transposed
    for (; row + per_panel <= m; row += per_panel)
      for (int group = row; group < row + per_panel; group += 8)
        for (int p = 0; p + 16 <= whole_pairs; p += 16) {
          T const* rows[8];
          for (int i = 0; i < 8; ++i) rows[i] = x.address(group + i, 2 * p);
          transpose_8x16_pairs<2 * per_panel>(pair_at(group, p), rows);
        }
  }
  // What the fast paths left: the rows past them, the last pairs of a row, an odd k's last value.
  int const done_pairs = x.transposed ? whole_pairs / 16 * 16 : whole_pairs;
  for (int r0 = 0; r0 < m; r0 += per_panel) {
    int const rows = std::min(per_panel, m - r0);
    for (int p = r0 < row ? done_pairs : 0; p < pairs(k); ++p)
      pack_pair(pair_at(r0, p), x, r0, rows, per_panel, p, k);
  }
}

}  // namespace detail

// Packs op(a) (m x k) into `out`, packed_a_size(m, k) values.
template <class T>
void pack_a(bf16* out, Factor<T> a, int m, int k) {
  detail::pack_rows<panel_rows>(reinterpret_cast<std::uint16_t*>(out), a, m, k);
}

// Packs op(b) (k x n) into `out`, packed_b_size(k, n) values: op(b)^T packed as pack_a
// packs, in panels of 8.
template <class T>
void pack_b(bf16* out, Factor<T> b, int k, int n) {
  detail::pack_rows<panel_columns>(reinterpret_cast<std::uint16_t*>(out), b.transpose(), n, k);
}

namespace detail {

// Rows [row, row + count) of column `column` of a matrix with k columns (within one group
// of 16 rows; x points at the first), rounded, into their words of pack_a's layout at
// `out`: every other word, the other being the pair's other column (zero for an odd k's
// last column, written here).
STRATA_BF16_KERNEL inline void pack_column_rows(std::uint16_t* out, float const* x, int k, int column, int row,
                                                int count) {
  std::uint16_t* const pair = out + pair_offset(panel_rows, k, row, column / 2);
  bool const odd = column % 2 == 1, last_of_odd_k = column == k - 1 && k % 2 == 1;
  __m256bh const rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), x));
  __m512i const words = _mm512_maskz_cvtepu16_epi32(0xffff, reinterpret_cast<__m256i const&>(rounded));
  std::uint32_t const inside = count == 16 ? 0xffffffffu : (1u << (2 * count)) - 1;
  __mmask32 const mine = inside & (odd ? 0xaaaaaaaau : last_of_odd_k ? 0xffffffffu : 0x55555555u);
  _mm512_mask_storeu_epi16(pair, mine, odd ? _mm512_maskz_slli_epi32(0xffff, words, 16) : words);
}

}  // namespace detail

// Elements [begin, end) of a column-major m x k matrix w (element e is w(e % m, e / m)),
// rounded, into their places in `out`, pack_a's layout of w (not transposed): how a refresh
// that rewrites the weights range by range keeps their packed copy. `w` points at element
// `begin`. Pairs of whole columns are interleaved 32 rows at a time, as pack_a does; the
// columns a range cuts, and the rows past a multiple of 32, 16 rows at a time.
STRATA_BF16_KERNEL inline void pack_a_elements(bf16* out, float const* w, int m, int k, std::size_t begin,
                                               std::size_t end) {
  auto* o = reinterpret_cast<std::uint16_t*>(out);
  std::size_t const rows = std::size_t(m);
  bool const aligned = reinterpret_cast<std::uintptr_t>(out) % 64 == 0;
  auto column_rows = [&](float const* x, int column, int from, int to) {  // rows [from, to) of one column
    for (int row = from; row < to;) {
      int const count = std::min(to - row, 16 - row % 16);
      detail::pack_column_rows(o, x + (row - from), k, column, row, count);
      row += count;
    }
  };
  for (std::size_t e = begin; e < end;) {
    int const column = int(e / rows), row = int(e % rows);
    float const* x = w + (e - begin);
    if (row == 0 && column % 2 == 0 && column + 1 < k && e + 2 * rows <= end) {  // two whole columns
      int r = 0;
      for (; r + panel_rows <= m; r += panel_rows) {
        std::uint16_t* const pair = o + pair_offset(panel_rows, k, r, column / 2);
        if (aligned) detail::interleave_32<float, true>(pair, x + r, x + rows + r);
        else detail::interleave_32(pair, x + r, x + rows + r);
      }
      column_rows(x + r, column, r, m);
      column_rows(x + rows + r, column + 1, r, m);
      e += 2 * rows;
      continue;
    }
    int const to = int(std::min(rows, std::size_t(row) + (end - e)));
    column_rows(x, column, row, to);
    e += std::size_t(to - row);
  }
  if (aligned) _mm_sfence();
}

// op(b) as the kernel reads it: packed by pack_b, or a plain column-major bf16 op(b) whose
// value pairs already lie side by side (leading dimension ld).
struct ColumnPairs {
  bf16 const* data = nullptr;
  bool packed = true;
  std::size_t ld = 0;
};

// op(b) (k x n) ready for multiply(): `b` itself where it is a plain bf16 op(b) with an even
// k and whole panels of columns (the kernel reads 8 at a time), else packed into `buffer`
// (packed_b_size(k, n) values).
template <class T>
ColumnPairs columns_of(Factor<T> b, int k, int n, bf16* buffer) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (!b.transposed && k % 2 == 0 && n % panel_columns == 0) return {b.data, false, std::size_t(b.ld)};
  }
  pack_b(buffer, b, k, n);
  return {buffer, true, 0};
}

namespace detail {

// One 32 x 8 tile of the result: the sums over `count` pairs of `a` (at the panel's first
// pair) by `b` (at the tile's first column and pair; packed by pack_b, or plain with leading
// dimension ldb), then, for its `rows` x `columns` inside c (leading dimension ldc):
// c = alpha * sums + beta * c. `beta == 0` never reads c.
template <bool packed_b>
STRATA_BF16_KERNEL inline void tile(int count, std::uint16_t const* a, std::uint16_t const* b,
                                    std::size_t ldb, float alpha, float beta, float* c, int ldc, int rows,
                                    int columns) {
  // A packed op(b)'s pairs lie 16 words apart, its columns 2; a plain one's 2 and ldb.
  std::size_t const pair_stride = packed_b ? 2 * panel_columns : 2, column_stride = packed_b ? 2 : ldb;
  constexpr int nr = panel_columns;
  __m512 top[nr], bottom[nr];
  for (int j = 0; j < nr; ++j) top[j] = bottom[j] = _mm512_setzero_ps();
  for (int p = 0; p < count; ++p, a += 2 * panel_rows, b += pair_stride) {
    __m512bh const a_top = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a));
    __m512bh const a_bottom = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + panel_rows));
#pragma GCC unroll 8
    for (int j = 0; j < nr; ++j) {
      std::int32_t pair;
      std::memcpy(&pair, b + j * column_stride, sizeof pair);
      __m512bh const b_j = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      top[j] = _mm512_dpbf16_ps(top[j], a_top, b_j);
      bottom[j] = _mm512_dpbf16_ps(bottom[j], a_bottom, b_j);
    }
  }
  __m512 const scale = _mm512_set1_ps(alpha);
  __mmask16 const top_rows = rows >= 16 ? 0xffff : __mmask16((1u << rows) - 1);
  __mmask16 const bottom_rows = rows >= 32 ? 0xffff : rows <= 16 ? 0 : __mmask16((1u << (rows - 16)) - 1);
  __m512 const keep = _mm512_set1_ps(beta);
  for (int j = 0; j < columns; ++j, c += ldc) {
    __m512 t = _mm512_mul_ps(scale, top[j]), u = _mm512_mul_ps(scale, bottom[j]);
    if (beta != 0.0f) {
      t = _mm512_fmadd_ps(keep, _mm512_maskz_loadu_ps(top_rows, c), t);
      u = _mm512_fmadd_ps(keep, _mm512_maskz_loadu_ps(bottom_rows, c + 16), u);
    }
    _mm512_mask_storeu_ps(c, top_rows, t);
    _mm512_mask_storeu_ps(c + 16, bottom_rows, u);
  }
}

}  // namespace detail

// The inner dimension is summed in blocks of this many pairs, a tile's sums kept in
// registers across a block (the MLP's products are one block).
inline constexpr int block_pairs = 512;

// c (m x n, leading dimension ldc) = alpha * op(a) op(b) + beta * c, with op(a) packed by
// pack_a(m, k) and op(b) from columns_of(k, n). Each element's sum runs in the same order
// however the caller splits c's columns, so a split product gives the bits of the whole one.
inline void multiply(bf16 const* packed_a, ColumnPairs b, int m, int n, int k, float alpha, float beta, float* c,
                     int ldc) {
  auto const* a = reinterpret_cast<std::uint16_t const*>(packed_a);
  auto const* b_data = reinterpret_cast<std::uint16_t const*>(b.data);
  int const all_pairs = pairs(k);
  for (int p0 = 0; p0 < all_pairs; p0 += block_pairs) {
    int const block = std::min(block_pairs, all_pairs - p0);
    float const keep = p0 == 0 ? beta : 1.0f;  // later blocks add to what the earlier ones wrote
    for (int j0 = 0; j0 < n; j0 += panel_columns) {
      std::uint16_t const* b_tile = b.packed ? b_data + pair_offset(panel_columns, k, j0, p0)
                                             : b_data + std::size_t(j0) * b.ld + std::size_t(p0) * 2;
      for (int i0 = 0; i0 < m; i0 += panel_rows) {
        std::uint16_t const* a_panel = a + pair_offset(panel_rows, k, i0, p0);
        float* const corner = c + std::size_t(j0) * std::size_t(ldc) + std::size_t(i0);
        int const rows = std::min(panel_rows, m - i0), columns = std::min(panel_columns, n - j0);
        if (b.packed) detail::tile<true>(block, a_panel, b_tile, 0, alpha, keep, corner, ldc, rows, columns);
        else detail::tile<false>(block, a_panel, b_tile, b.ld, alpha, keep, corner, ldc, rows, columns);
      }
    }
  }
}

}  // namespace strata::bf16_gemm

#undef STRATA_BF16_KERNEL
