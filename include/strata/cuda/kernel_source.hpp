#pragma once
// The device prelude every kernel module starts with, and the backend's own kernels (GEMM
// operand casts, bias, sums, the replicas' reduction), as CUDA C++ source that NVRTC
// compiles at run time for the GPU present (kernels.hpp). A layer's kernels are a module
// beside the layer (nn/*_cuda.hpp), an optimizer's come from its element rule
// (optim/element_rule_cuda.hpp). Keeping them as a string means no translation unit of a
// strata program is ever compiled by nvcc: Boost.Hana and Eigen never meet device code, and
// a user builds with their ordinary C++ compiler (docs/gpu.md says why this was chosen).
//
// Conventions: column-major float matrices, one sample per column; element-wise kernels use
// grid-stride loops; every sum that reaches the host is formed in a fixed order (per-sample
// or per-block partials, then one block), so a run repeats bit for bit. The prelude's
// hashing and rounding are the CPU backend's (core/random.hpp, core/dtype.hpp), so dropout
// masks and 16-bit roundings are identical on both.

#include <array>
#include <cstddef>
#include <string_view>

namespace strata::cuda {

// The kernels, in the order of kernel_names; Kernel indexes both.
enum class Kernel : int {
  add_bias, sum_doubles, sum_squares, round_bf16, round_fp16, to_bf16, to_fp16, reduce_replicas, scale, count_
};

inline constexpr char const* kernel_names[] = {
    "strata_add_bias", "strata_sum_doubles", "strata_sum_squares", "strata_round_bf16",      "strata_round_fp16",
    "strata_to_bf16",  "strata_to_fp16",     "strata_reduce_replicas", "strata_scale"};
static_assert(sizeof(kernel_names) / sizeof(kernel_names[0]) == std::size_t(Kernel::count_),
              "one name per Kernel");

// Threads per block of every kernel; the block sums (sum_doubles, sum_squares, a layer-wise
// optimizer's moments) rely on it.
inline constexpr int block_threads = 256;
// Blocks of sum_squares and a layer-wise optimizer's moments: their partials are summed by
// one block of sum_doubles.
inline constexpr int sum_blocks = 256;
// Threads of a warp: a module of warp_body's kernels launches this many per column.
inline constexpr int warp_threads = 32;
// Logical replicas whose gradients reduce_replicas sums in one launch.
inline constexpr int max_peers = 16;

// What every module's source starts with (strata's own kernels, a layer's, an optimizer
// rule's): types, the grid-stride loop, the CPU's hashing and 16-bit rounding, a finite
// test and a fixed-order block sum.
inline constexpr char const device_prelude[] = R"CUDA(
typedef unsigned long long u64;
typedef long long i64;
#define STRATA_THREADS 256
#define STRATA_MAX_PEERS 16

#define GRID_LOOP(i, n) for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += i64(blockDim.x) * gridDim.x)

__device__ __forceinline__ u64 mix64(u64 x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ u64 mix64(u64 a, u64 b) { return mix64(a ^ mix64(b)); }
__device__ __forceinline__ float uniform01(u64 bits) { return float(bits >> 40) * (1.0f / 16777216.0f); }

__device__ __forceinline__ bool finite(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }
__device__ __forceinline__ bool finite(double x) {
  return (__double_as_longlong(x) & 0x7ff0000000000000ll) != 0x7ff0000000000000ll;
}

// bfloat16: round to nearest even, NaN stays a quiet NaN (core/dtype.hpp's bf16::from_float).
__device__ __forceinline__ unsigned short bf16_bits(float value) {
  unsigned u = __float_as_uint(value);
  unsigned rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  unsigned nan = (u >> 16) | 0x40u;
  return (unsigned short)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
__device__ __forceinline__ float bf16_value(unsigned short bits) { return __uint_as_float(unsigned(bits) << 16); }
// IEEE binary16 through the hardware's round-to-nearest-even conversions.
__device__ __forceinline__ unsigned short fp16_bits(float value) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(value));
  return h;
}
__device__ __forceinline__ float fp16_value(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// The sum of every thread's `mine` over the block, in a fixed tree order; every thread gets it.
__device__ double block_sum(double mine) {
  __shared__ double part[STRATA_THREADS];
  part[threadIdx.x] = mine;
  __syncthreads();
  for (int width = STRATA_THREADS / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) part[threadIdx.x] += part[threadIdx.x + width];
    __syncthreads();
  }
  double total = part[0];
  __syncthreads();  // before the next call overwrites part
  return total;
}
)CUDA";

// What a module whose kernels work a warp per column adds after the prelude (LayerNorm's,
// SelfAttention's softmax): the warps' grid-stride loop and sums over a warp's lanes in a
// fixed butterfly. tests/test_kernels_on_host.cpp runs this text on the CPU too.
inline constexpr char const warp_body[] = R"CUDA(
// Column j of the warps' grid-stride loop. Blocks are whole warps, so the 32 lanes of a warp
// take the same columns and meet at every shuffle.
#define WARP_LOOP(j, n)                                                                                 \
  for (long long j = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; j < (n);                  \
       j += (long long)gridDim.x * blockDim.x / 32)

// The sum (the largest) of v over the warp's 32 lanes, the same in every lane: a + b == b + a,
// so the two lanes of each pair form one value at each of the 5 steps.
__device__ __forceinline__ double warp_sum(double v) {
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
)CUDA";

// The texts joined into one, at compile time: a module's source after the prelude.
template <std::size_t... N>
constexpr auto join_sources(char const (&... parts)[N]) {
  std::array<char, (N + ...) - sizeof...(N) + 1> out{};
  std::size_t at = 0;
  auto const append = [&](char const* part, std::size_t n) {
    for (std::size_t i = 0; i + 1 < n; ++i) out[at++] = part[i];
  };
  (append(parts, N), ...);
  return out;
}
// A joined source as text (without its terminating zero).
template <std::size_t N>
constexpr std::string_view source_text(std::array<char, N> const& joined) {
  return {joined.data(), N - 1};
}

namespace detail {
inline constexpr char const backend_kernels[] = R"CUDA(
extern "C" __global__ void strata_add_bias(float* y, const float* bias, int rows, i64 n) {
  GRID_LOOP(i, n) y[i] += bias[i % rows];
}
// One block: *out = sum of in[0..n), in a fixed order.
extern "C" __global__ void strata_sum_doubles(const double* in, int n, double* out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += STRATA_THREADS) s += in[i];
  double total = block_sum(s);
  if (threadIdx.x == 0) *out = total;
}
// partials[block] = sum of x^2 over the block's stride of x (a fixed grid: a fixed order).
extern "C" __global__ void strata_sum_squares(const float* x, i64 n, double* partials) {
  double s = 0.0;
  GRID_LOOP(i, n) s += double(x[i]) * double(x[i]);
  double total = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}
extern "C" __global__ void strata_round_bf16(float* x, i64 n) {
  GRID_LOOP(i, n) x[i] = bf16_value(bf16_bits(x[i]));
}
extern "C" __global__ void strata_round_fp16(float* x, i64 n) {
  GRID_LOOP(i, n) x[i] = fp16_value(fp16_bits(x[i]));
}
extern "C" __global__ void strata_to_bf16(const float* x, unsigned short* out, i64 n) {
  GRID_LOOP(i, n) out[i] = bf16_bits(x[i]);
}
extern "C" __global__ void strata_to_fp16(const float* x, unsigned short* out, i64 n) {
  GRID_LOOP(i, n) out[i] = fp16_bits(x[i]);
}
// out = scale * (peer 0 + peer 1 + ...), added in replica order: comm::reduce_range's arithmetic.
struct Peers {
  const float* p[STRATA_MAX_PEERS];
};
extern "C" __global__ void strata_reduce_replicas(Peers peers, int count, float* out, i64 n, float scale) {
  GRID_LOOP(i, n) {
    float s;
    if (count == 1) {
      s = peers.p[0][i] * scale;
    } else {
      s = peers.p[0][i] + peers.p[1][i];
      for (int r = 2; r < count; ++r) s += peers.p[r][i];
      if (scale != 1.0f) s *= scale;
    }
    out[i] = s;
  }
}
extern "C" __global__ void strata_scale(float* x, i64 n, float factor) {
  GRID_LOOP(i, n) x[i] *= factor;
}
)CUDA";
inline constexpr auto kernel_source_joined = join_sources(device_prelude, backend_kernels);
}  // namespace detail

// strata's own kernels, as NVRTC compiles them.
inline constexpr std::string_view kernel_source = source_text(detail::kernel_source_joined);

}  // namespace strata::cuda
