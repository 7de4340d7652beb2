#pragma once
// oneDNN as the CPU backend's GEMM engine, in a program that links the strata::dnnl target
// (it defines STRATA_DNNL). oneDNN is what PyTorch and TensorFlow call for CPU matrix
// products. Float products run `dnnl_sgemm`, except, where strata::dnnl found OpenBLAS, the
// few shapes oneDNN's AVX2 kernels run at half speed, which OpenBLAS multiplies
// (detail::float_gemm below). Where a mixed-precision pass has bound bf16
// products (core/product_precision.hpp) and the CPU has bf16 dot products (AVX512_BF16,
// AMX), the inputs are rounded to bf16 and multiplied with float sums, about twice the float
// rate (docs/benchmarks.md). On AVX512_BF16, strata's own kernel (core/bf16_gemm.hpp)
// multiplies the products whose first factor is not transposed (the weights, in Dense's
// forward, as the update packed them) and oneDNN's matmul the others; on AMX, oneDNN's
// matmul all of them, since its tile units outrun any dot-product kernel.
// What the CPU has is asked once per process.
//
// Replicas are strata's threads, so every product runs on the thread that calls it: each
// calling thread sets its OpenMP team (oneDNN's threads in Debian's build) to one thread the
// first time it calls.

#if !defined(STRATA_DNNL)
#error "strata/core/dnnl.hpp without STRATA_DNNL: link the strata::dnnl target, which defines it (core/backend.hpp then includes this header)"
#endif

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/bf16_gemm.hpp"
#include "strata/core/blas.hpp"
#include "strata/core/dtype.hpp"
#include "strata/core/intra_op.hpp"
#include "strata/core/error.hpp"
#include "strata/core/product_precision.hpp"
#include "strata/core/tensor.hpp"

// oneDNN's threads are OpenMP's (libgomp, which the strata::dnnl target links). The
// compiler's own <omp.h> declares omp_set_num_threads (no -fopenmp needed), so a program that
// also includes it sees one declaration.
#if __has_include(<omp.h>)
#include <omp.h>
#else
extern "C" void omp_set_num_threads(int);
#endif

namespace strata {

namespace detail {

inline void dnnl_check(dnnl_status_t status, char const* call) {
  if (status != dnnl_success)
    throw DeviceError(message("oneDNN: ", call, " failed: ", dnnl_status2str(status)));
}

inline void dnnl_on_calling_thread() {
  thread_local bool const one_thread = (omp_set_num_threads(1), true);
  (void)one_thread;
}

// The CPU's instruction set as oneDNN sees it (DNNL_MAX_CPU_ISA lowers it).
inline dnnl_cpu_isa_t dnnl_isa() {
  static dnnl_cpu_isa_t const isa = dnnl_get_effective_cpu_isa();
  return isa;
}

inline char const* dnnl_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    default: return "below avx2";
  }
}

// The process's one CPU engine.
class DnnlEngine {
 public:
  static dnnl_engine_t get() {
    static DnnlEngine const engine;
    return engine.engine_;
  }
  DnnlEngine(DnnlEngine const&) = delete;
  DnnlEngine& operator=(DnnlEngine const&) = delete;

 private:
  DnnlEngine() { dnnl_check(dnnl_engine_create(&engine_, dnnl_cpu, 0), "dnnl_engine_create"); }
  ~DnnlEngine() { dnnl_engine_destroy(engine_); }
  dnnl_engine_t engine_ = nullptr;
};

// out[i] = bf16(in[i]), 32 at a time with the CPU's own conversion (round to nearest even;
// like every AVX512_BF16 conversion it reads float subnormals as zero).
__attribute__((target("avx512f,avx512bf16"))) inline void to_bf16_avx512(bf16* out, float const* in,
                                                                           std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512bh const packed = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + i + 16), _mm512_loadu_ps(in + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i const&>(packed));
  }
  for (; i < n; ++i) out[i].bits = bf16::from_float(in[i]);
}

// x rounded to bf16 and widened back to float, 16 lanes: bf16::from_float's integer rounding
// (nearest even, NaN kept quiet), so the bits are round_to<bf16>'s.
__attribute__((target("avx512f"))) inline __m512 round_bf16_lanes(__m512 x) {
  // (The zero-masked shifts: GCC 12's plain ones start from an "undefined" packet it then
  // warns about, bug 105593; all 16 lanes are kept, so the result is the same.)
  __mmask16 constexpr all = 0xffff;
  __m512i const u = _mm512_castps_si512(x);
  __m512i const lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(all, u, 16), _mm512_set1_epi32(1));
  __m512i const rounded =
      _mm512_maskz_srli_epi32(all, _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  __mmask16 const nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  __m512i const quiet = _mm512_or_si512(_mm512_maskz_srli_epi32(all, u, 16), _mm512_set1_epi32(0x40));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_mask_blend_epi32(nan, rounded, quiet), 16));
}

// In one pass over `in`: rounded[i] = in[i] rounded to bf16 (as float), and out[i] = that
// value converted as to_bf16_avx512 converts it. The same bits as round_to<bf16> followed
// by to_bf16_avx512, with `in` read once and nothing read back. `rounded` is written past
// the caches where it is aligned (non-temporal stores: the next step's products read
// `out`, not it, so it need not displace anything); `out` stays cached for them. `rounded`
// == nullptr: only `out` is written.
__attribute__((target("avx512f,avx512bf16"))) inline void round_with_bf16_copy_avx512(float* rounded, bf16* out,
                                                                                       float const* in, std::size_t n) {
  enum class Floats { none, streamed, stored };
  Floats const floats = rounded == nullptr                                   ? Floats::none
                        : reinterpret_cast<std::uintptr_t>(rounded) % 64 == 0 ? Floats::streamed
                                                                              : Floats::stored;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 const low = round_bf16_lanes(_mm512_loadu_ps(in + i)), high = round_bf16_lanes(_mm512_loadu_ps(in + i + 16));
    if (floats == Floats::streamed) {
      _mm512_stream_ps(rounded + i, low);
      _mm512_stream_ps(rounded + i + 16, high);
    } else if (floats == Floats::stored) {
      _mm512_storeu_ps(rounded + i, low);
      _mm512_storeu_ps(rounded + i + 16, high);
    }
    __m512bh const packed = _mm512_cvtne2ps_pbh(high, low);
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i const&>(packed));
  }
  if (floats == Floats::streamed) _mm_sfence();
  for (; i < n; ++i) {
    float const r = float(bf16(in[i]));
    if (rounded != nullptr) rounded[i] = r;
    out[i].bits = bf16::from_float(r);
  }
}

// The bf16 products of one thread: a matmul primitive per product shape (made once, reused
// every step), and the bf16 copies of the current product's inputs.
class DnnlBf16Products {
 public:
  static DnnlBf16Products& of_this_thread() {
    thread_local DnnlBf16Products products;
    return products;
  }

  // The product's inputs: `a` in bf16, read from the copy bound on this thread where it lies
  // inside it (core/product_precision.hpp), else rounded into the calling thread's buffer
  // once per product before its parts run; `b` likewise where it lies in the copy, else
  // left in float for each part to round the columns it reads (below).
  struct Inputs {
    bf16 const* a;
    int a_rows;
    bf16 const* b;  // nullptr: b_float is rounded part by part
    ConstMatrixView b_float;
  };
  Inputs round_inputs(ConstMatrixView a, ConstMatrixView b) {
    return {in_bf16(a, a_), a.rows, bf16_copy_bound.find(b.data, b.size()), b};
  }

  // Output columns [first, first + count) of c (column-major, c.rows x n) = alpha * op(a) *
  // op(b) + beta * c, with k the inner dimension; on this thread's primitives.
  void gemm(bool trans_a, bool trans_b, float alpha, Inputs in, int k, float beta, MatrixView c, int first,
            int count) {
    auto [b_part, ldb] = part_of_b(in, trans_b, first, count);
    Matmul& matmul = find(Key{c.rows, count, k, in.a_rows, ldb, trans_a, trans_b, alpha, beta});
    dnnl_check(dnnl_memory_set_data_handle(matmul.weights, const_cast<bf16*>(in.a)), "dnnl_memory_set_data_handle");
    dnnl_check(dnnl_memory_set_data_handle(matmul.source, const_cast<bf16*>(b_part)), "dnnl_memory_set_data_handle");
    dnnl_check(dnnl_memory_set_data_handle(matmul.destination, c.data + std::size_t(first) * std::size_t(c.rows)),
               "dnnl_memory_set_data_handle");
    dnnl_exec_arg_t const args[] = {
        {DNNL_ARG_SRC, matmul.source}, {DNNL_ARG_WEIGHTS, matmul.weights}, {DNNL_ARG_DST, matmul.destination}};
    dnnl_check(dnnl_primitive_execute(matmul.primitive, stream_, 3, args), "dnnl_primitive_execute");
    dnnl_check(dnnl_stream_wait(stream_), "dnnl_stream_wait");
  }

  ~DnnlBf16Products() {
    for (Matmul& m : matmuls_) destroy(m);
    if (stream_ != nullptr) dnnl_stream_destroy(stream_);
  }
  DnnlBf16Products(DnnlBf16Products const&) = delete;
  DnnlBf16Products& operator=(DnnlBf16Products const&) = delete;

  // At most this many shapes are kept per thread; a new one replaces the least recently used.
  static constexpr std::size_t max_shapes = 64;

 private:
  struct Key {
    int m, n, k, lda, ldb;
    bool trans_a, trans_b;
    float alpha, beta;
    bool operator==(Key const&) const = default;
  };
  struct Matmul {
    Key key;
    dnnl_primitive_t primitive = nullptr;
    dnnl_memory_t source = nullptr, weights = nullptr, destination = nullptr;
  };

  DnnlBf16Products() {
    matmuls_.reserve(max_shapes);  // a found matmul stays where it is until the next find
    dnnl_check(dnnl_stream_create(&stream_, DnnlEngine::get(), dnnl_stream_default_flags), "dnnl_stream_create");
  }

  // The matmul of `key`, made on first use. matmuls_ runs from least to most recently used.
  Matmul& find(Key const& key) {
    auto const found = std::find_if(matmuls_.begin(), matmuls_.end(), [&](Matmul const& m) { return m.key == key; });
    if (found != matmuls_.end()) {
      std::rotate(found, found + 1, matmuls_.end());
      return matmuls_.back();
    }
    if (matmuls_.size() == max_shapes) {
      destroy(matmuls_.front());
      matmuls_.erase(matmuls_.begin());
    }
    matmuls_.push_back(make(key));
    return matmuls_.back();
  }

  // The column-major product c = op(a) op(b) is oneDNN's row-major dst = src * weights with
  // dst = c^T (n x m), src = op(b)^T (n x k) and weights = op(a)^T (k x m): a transpose is a
  // swap of strides, never a copy.
  static Matmul make(Key const& key) {
    dnnl_memory_desc_t source{}, weights{}, destination{};
    dnnl_dims_t const source_dims{key.n, key.k}, weight_dims{key.k, key.m}, destination_dims{key.n, key.m};
    dnnl_dims_t const source_strides{key.trans_b ? 1 : key.ldb, key.trans_b ? key.ldb : 1};
    dnnl_dims_t const weight_strides{key.trans_a ? 1 : key.lda, key.trans_a ? key.lda : 1};
    dnnl_dims_t const destination_strides{key.m, 1};
    dnnl_check(dnnl_memory_desc_init_by_strides(&source, 2, source_dims, dnnl_bf16, source_strides), "memory desc");
    dnnl_check(dnnl_memory_desc_init_by_strides(&weights, 2, weight_dims, dnnl_bf16, weight_strides), "memory desc");
    dnnl_check(dnnl_memory_desc_init_by_strides(&destination, 2, destination_dims, dnnl_f32, destination_strides),
               "memory desc");
    dnnl_matmul_desc_t desc{};
    dnnl_check(dnnl_matmul_desc_init(&desc, &source, &weights, nullptr, &destination), "dnnl_matmul_desc_init");

    // What only the making needs, released however it ends.
    struct Temporaries {
      dnnl_primitive_attr_t attr = nullptr;
      dnnl_post_ops_t post_ops = nullptr;
      dnnl_primitive_desc_t primitive_desc = nullptr;
      ~Temporaries() {
        if (primitive_desc != nullptr) dnnl_primitive_desc_destroy(primitive_desc);
        if (post_ops != nullptr) dnnl_post_ops_destroy(post_ops);
        if (attr != nullptr) dnnl_primitive_attr_destroy(attr);
      }
    } t;
    Matmul made{key};
    try {
      dnnl_check(dnnl_primitive_attr_create(&t.attr), "dnnl_primitive_attr_create");
      if (key.alpha != 1.0f)
        dnnl_check(dnnl_primitive_attr_set_output_scales(t.attr, 1, 0, &key.alpha), "output scales");
      if (key.beta != 0.0f) {  // dst = alpha * src * weights + beta * dst
        dnnl_check(dnnl_post_ops_create(&t.post_ops), "dnnl_post_ops_create");
        dnnl_check(dnnl_post_ops_append_sum(t.post_ops, key.beta), "dnnl_post_ops_append_sum");
        dnnl_check(dnnl_primitive_attr_set_post_ops(t.attr, t.post_ops), "dnnl_primitive_attr_set_post_ops");
      }
      dnnl_engine_t const engine = DnnlEngine::get();
      dnnl_check(dnnl_primitive_desc_create(&t.primitive_desc, &desc, t.attr, engine, nullptr), "matmul primitive desc");
      dnnl_check(dnnl_primitive_create(&made.primitive, t.primitive_desc), "dnnl_primitive_create");
      dnnl_check(dnnl_memory_create(&made.source, &source, engine, DNNL_MEMORY_NONE), "dnnl_memory_create");
      dnnl_check(dnnl_memory_create(&made.weights, &weights, engine, DNNL_MEMORY_NONE), "dnnl_memory_create");
      dnnl_check(dnnl_memory_create(&made.destination, &destination, engine, DNNL_MEMORY_NONE), "dnnl_memory_create");
    } catch (...) {
      destroy(made);
      throw;
    }
    return made;
  }

  static bf16 const* in_bf16(ConstMatrixView m, std::vector<bf16>& buffer) {
    if (bf16 const* kept = bf16_copy_bound.find(m.data, m.size())) return kept;
    buffer.resize(m.size());
    to_bf16_avx512(buffer.data(), m.data, m.size());
    return buffer.data();
  }

  // Columns [first, first + count) of op(b) in bf16, and their leading dimension. Where b has
  // no bound copy, this part rounds just those columns into this thread's buffer, densely:
  // the parts of a split product round in parallel, and a part of a transposed b (rows of b,
  // strided in memory) becomes a dense block, the layout oneDNN's brgemm kernels take (a
  // strided one falls back to its slower gemm kernel).
  std::pair<bf16 const*, int> part_of_b(Inputs const& in, bool trans_b, int first, int count) {
    ConstMatrixView const b = in.b_float;
    if (in.b != nullptr) return {in.b + (trans_b ? std::size_t(first) : std::size_t(first) * std::size_t(b.rows)), b.rows};
    if (!trans_b) {  // columns of b: contiguous
      b_.resize(std::size_t(count) * std::size_t(b.rows));
      to_bf16_avx512(b_.data(), b.data + std::size_t(first) * std::size_t(b.rows), b_.size());
      return {b_.data(), b.rows};
    }
    b_.resize(std::size_t(count) * std::size_t(b.cols));  // rows [first, first + count) of b, count x b.cols
    for (int j = 0; j < b.cols; ++j)
      to_bf16_avx512(b_.data() + std::size_t(j) * std::size_t(count),
                     b.data + std::size_t(j) * std::size_t(b.rows) + std::size_t(first), std::size_t(count));
    return {b_.data(), count};
  }

  static void destroy(Matmul& m) {
    for (dnnl_memory_t memory : {m.source, m.weights, m.destination})
      if (memory != nullptr) dnnl_memory_destroy(memory);
    if (m.primitive != nullptr) dnnl_primitive_destroy(m.primitive);
  }

  dnnl_stream_t stream_ = nullptr;
  std::vector<Matmul> matmuls_;
  std::vector<bf16> a_, b_;
};

// c = alpha * a op(b) + beta * c on strata's bf16 kernel, split over the bound intra-op team
// into `parts` of c's columns: a (in Dense's and attention's products, the weights) is the
// kernel's packed first factor, read from its packed copy where one is bound (the update
// writes it) or packed here, each part packing a share of its panels before any part
// multiplies; each part packs its columns of op(b). A factor without a bound copy is
// rounded while packed, to the copy's bits: bound or not, split or not, a product gives the
// same bits.
// Products of a transposed a (Dense's input gradient, W^T dy) stay on oneDNN's matmul: as
// c^T = op(b)^T a on the kernel, with a read where it lies, they ran slower in the MLP's
// step (docs/benchmarks.md).
inline void kernel_bf16_gemm(bool trans_b, float alpha, ConstMatrixView a, ConstMatrixView b, float beta, MatrixView c,
                             int parts) {
  namespace gemm = bf16_gemm;
  thread_local std::vector<bf16> shared, own;  // the calling thread's, read by all parts; each part's own
  Bf16Copy const& bound = bf16_copy_bound;     // (this thread's: the parts' threads bind none)
  // A factor as the kernel takes it: its bf16 copy where it lies in the bound one, else its floats.
  auto with_factor = [](ConstMatrixView x, bf16 const* copy, bool transposed, auto&& f) {
    if (copy != nullptr) f(gemm::Factor<bf16>{copy, x.rows, transposed});
    else f(gemm::Factor<float>{x.data, x.rows, transposed});
  };
  int const m = c.rows, k = a.cols;
  bf16 const* packed = bound.find_packed(a.data, a.rows, a.cols);
  if (packed == nullptr) {  // packed here, its panels split over the parts as the product is
    shared.resize(gemm::packed_a_size(m, k));
    bf16* const out = shared.data();  // (a thread_local named in a part would be that thread's)
    bf16 const* const a_copy = bound.find(a.data, a.size());
    int const panels = gemm::panels(m, gemm::panel_rows), pack_parts = std::min(parts, panels);
    run_intra_op(pack_parts, [&](int p) {
      auto const [first, count] = split_evenly(panels, pack_parts, p);
      int const row = first * gemm::panel_rows, rows = std::min(m - row, count * gemm::panel_rows);
      with_factor(a, a_copy, false, [&](auto factor) {
        gemm::pack_a(out + std::size_t(first) * gemm::packed_a_size(gemm::panel_rows, k), factor.from(row, 0), rows, k);
      });
    });
    packed = out;
  }
  bf16 const* const b_copy = bound.find(b.data, b.size());
  run_intra_op(parts, [&](int p) {
    auto const [first, count] = split_columns(c.cols, parts, p);
    with_factor(b, b_copy, trans_b, [&](auto factor) {
      own.resize(gemm::packed_b_size(k, count));
      gemm::ColumnPairs const columns = gemm::columns_of(factor.from(0, first), k, count, own.data());
      gemm::multiply(packed, columns, m, count, k, alpha, beta, c.columns(first, count).data, c.rows);
    });
  });
}

// Output columns [first, first + count) of c = alpha * op(a) * op(b) + beta * c in float:
// dnnl_sgemm is row-major, so it computes c^T = op(b)^T op(a)^T.
inline void dnnl_float_gemm(bool trans_a, bool trans_b, float alpha, ConstMatrixView a, ConstMatrixView b, float beta,
                            MatrixView c, int first, int count) {
  int const k = trans_a ? a.rows : a.cols;
  float const* b_part = b.data + (trans_b ? std::size_t(first) : std::size_t(first) * std::size_t(b.rows));
  dnnl_check(dnnl_sgemm(trans_b ? 'T' : 'N', trans_a ? 'T' : 'N', count, c.rows, k, alpha, b_part, b.rows, a.data,
                        a.rows, beta, c.data + std::size_t(first) * std::size_t(c.rows), c.rows),
             "dnnl_sgemm");
}

// Which float products OpenBLAS multiplies where strata::dnnl links it beside oneDNN.
// oneDNN 2.6's AVX2 float GEMM runs at half its rate or less when op(a) is a itself, a's
// columns lie a multiple of 512 floats apart (a.rows = 512, 1024, 1536, ...), the part has
// few output columns (at most 256; at most 512 where a has 512 rows) and the inner dimension
// is not tiny: 34-67 GFLOP/s where 496, 528, 1000 or 1040 rows run at 86-96 on a Zen 3 core.
// OpenBLAS packs its factors before it multiplies and runs them at 68-91, 1.1-2.6 times
// oneDNN (docs/benchmarks.md, "Float products on two engines"); elsewhere oneDNN is as fast
// or faster. These are the forward products of a Dense<_, 512k> layer at a replica's batch,
// and its weight gradient where its input has few features.
constexpr bool dnnl_avx2_slow_float_product(bool trans_a, int a_rows, int inner, int columns) {
  int const few_columns = a_rows == 512 ? 512 : 256;
  return !trans_a && a_rows >= 512 && a_rows % 512 == 0 && columns <= few_columns && inner >= 64;
}

// STRATA_DNNL_OPENBLAS in the environment: "0" keeps every product on oneDNN (to compare the
// engines, or to rule OpenBLAS out); unset or "1", OpenBLAS takes the products above where
// the CPU is one it serves. Anything else is refused, naming the value.
inline bool openblas_beside_dnnl_wanted(char const* value) {
  if (value == nullptr || std::string_view(value) == "1") return true;
  if (std::string_view(value) == "0") return false;
  throw ConfigError(message("STRATA_DNNL_OPENBLAS=", value,
                            ": expected 0 (oneDNN multiplies every product) or 1 (OpenBLAS beside it, the default)"));
}

// Whether this process hands those products to OpenBLAS: strata::dnnl found OpenBLAS, oneDNN
// runs its AVX2 float kernels, OpenBLAS picked kernels with AVX2 (core/blas.hpp), and
// STRATA_DNNL_OPENBLAS is not 0. oneDNN's AVX-512 float GEMM keeps everything: on Zen 4 it
// ran the anchor MLP's products, 1024-row ones included, faster than OpenBLAS
// (docs/benchmarks.md). Asked once.
inline bool openblas_beside_dnnl() {
#if defined(STRATA_OPENBLAS) || defined(STRATA_DNNL_OPENBLAS)
  static bool const beside = openblas_beside_dnnl_wanted(std::getenv("STRATA_DNNL_OPENBLAS")) &&
                             (dnnl_isa() & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2 &&
                             (dnnl_isa() & dnnl_cpu_isa_avx512_core) != dnnl_cpu_isa_avx512_core &&
                             openblas_kernel_note(openblas_get_corename(), true, false).empty();
  return beside;
#else
  return false;
#endif
}

// Output columns [first, first + count) of a float product, on the engine that runs it faster here.
inline void float_gemm(bool trans_a, bool trans_b, float alpha, ConstMatrixView a, ConstMatrixView b, float beta,
                       MatrixView c, int first, int count) {
#if defined(STRATA_OPENBLAS) || defined(STRATA_DNNL_OPENBLAS)
  if (openblas_beside_dnnl() && dnnl_avx2_slow_float_product(trans_a, a.rows, trans_a ? a.rows : a.cols, count)) {
    openblas_float_gemm(trans_a, trans_b, alpha, a, b, beta, c, first, count);
    return;
  }
#endif
  dnnl_float_gemm(trans_a, trans_b, alpha, a, b, beta, c, first, count);
}

}  // namespace detail

// Whether this process multiplies bf16 where a mixed-precision pass binds bf16 products:
// oneDNN sees bf16 dot products on this CPU. Asked once.
inline bool bf16_products_available() {
  static bool const available =
      (detail::dnnl_isa() & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  return available;
}

// Whether strata's bf16 kernel multiplies them (core/bf16_gemm.hpp): on AVX512_BF16 without
// AMX. Asked once.
inline bool bf16_kernel_products() {
  static bool const kernel =
      bf16_products_available() && bf16_gemm::available() &&
      (detail::dnnl_isa() & dnnl_cpu_isa_avx512_core_amx) != dnnl_cpu_isa_avx512_core_amx;
  return kernel;
}

// "oneDNN 2.6.3, avx512_core_bf16 (bf16 products under MixedPrecision, strata's bf16
// kernel)": the version, the instruction set it runs and what MixedPrecision multiplies, on
// which engine.
// Where OpenBLAS is linked beside it, what it multiplies is added ("; OpenBLAS 0.3.21, Zen
// kernels, for the float products of 512k-row weights"), or that it does nothing here.
inline std::string cpu_gemm_engine() {
  dnnl_version_t const* v = dnnl_version();
  std::string const dnnl =
      "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + ", " +
      detail::dnnl_isa_name(detail::dnnl_isa()) +
      (!bf16_products_available() ? " (float products under MixedPrecision: no AVX512_BF16)"
       : bf16_kernel_products()   ? " (bf16 products under MixedPrecision, strata's bf16 kernel)"
                                  : " (bf16 products under MixedPrecision, oneDNN's matmul)");
#if defined(STRATA_OPENBLAS) || defined(STRATA_DNNL_OPENBLAS)
  return dnnl + (detail::openblas_beside_dnnl()
                     ? "; " + openblas_engine() + ", for the float products of 512k-row weights"
                 : !detail::openblas_beside_dnnl_wanted(std::getenv("STRATA_DNNL_OPENBLAS"))
                     ? "; OpenBLAS beside it turned off (STRATA_DNNL_OPENBLAS=0)"
                     : "; OpenBLAS linked, unused on this CPU");
#else
  return dnnl;
#endif
}

}  // namespace strata
