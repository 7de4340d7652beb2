#pragma once
// The device kernels of the Cuda backend, as CUDA C++ source that NVRTC compiles at run time
// for the GPU present (kernels.hpp). Keeping them as a string means no translation unit of a
// strata program is ever compiled by nvcc: Boost.Hana and Eigen never meet device code, and
// a user builds with their ordinary C++ compiler (docs/gpu.md says why this was chosen).
//
// Conventions: column-major float matrices, one sample per column; element-wise kernels use
// grid-stride loops; every sum that reaches the host is formed in a fixed order (per-sample
// or per-block partials, then one block), so a run repeats bit for bit. The hashing and
// rounding below are the CPU backend's (core/random.hpp, core/dtype.hpp), so dropout masks
// and 16-bit roundings are identical on both.

#include <cstddef>

namespace strata::cuda {

// The kernels, in the order of kernel_names; Kernel indexes both.
enum class Kernel : int {
  add_bias, relu, relu_backward, tanh, tanh_backward, gelu, gelu_backward, multiply, dropout,
  softmax_cross_entropy, count_correct, squared_error, sum_doubles, sum_squares, round_bf16, round_fp16,
  to_bf16, to_fp16, reduce_replicas, scale, sgd, adam, lamb_moments, lamb_apply, count_
};

inline constexpr char const* kernel_names[] = {
    "strata_add_bias",      "strata_relu",          "strata_relu_backward",  "strata_tanh",
    "strata_tanh_backward", "strata_gelu",          "strata_gelu_backward",  "strata_multiply",
    "strata_dropout",       "strata_softmax_xent",  "strata_count_correct",  "strata_squared_error",
    "strata_sum_doubles",   "strata_sum_squares",   "strata_round_bf16",     "strata_round_fp16",
    "strata_to_bf16",       "strata_to_fp16",       "strata_reduce_replicas", "strata_scale",
    "strata_sgd",           "strata_adam",          "strata_lamb_moments",   "strata_lamb_apply"};
static_assert(sizeof(kernel_names) / sizeof(kernel_names[0]) == std::size_t(Kernel::count_),
              "one name per Kernel");

// Threads per block of every kernel; the block sums (sum_doubles, sum_squares, lamb_moments) rely on it.
inline constexpr int block_threads = 256;
// Blocks of sum_squares and lamb_moments: their partials are summed by one block of sum_doubles.
inline constexpr int sum_blocks = 256;
// Logical replicas whose gradients reduce_replicas sums in one launch.
inline constexpr int max_peers = 16;

inline constexpr char const kernel_source[] = R"CUDA(
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

extern "C" __global__ void strata_add_bias(float* y, const float* bias, int rows, i64 n) {
  GRID_LOOP(i, n) y[i] += bias[i % rows];
}
extern "C" __global__ void strata_relu(const float* x, float* y, i64 n) {
  GRID_LOOP(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
extern "C" __global__ void strata_relu_backward(const float* y, const float* dy, float* dx, i64 n) {
  GRID_LOOP(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
extern "C" __global__ void strata_tanh(const float* x, float* y, i64 n) {
  GRID_LOOP(i, n) y[i] = tanhf(x[i]);
}
extern "C" __global__ void strata_tanh_backward(const float* y, const float* dy, float* dx, i64 n) {
  GRID_LOOP(i, n) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}
extern "C" __global__ void strata_gelu(const float* x, float* y, i64 n) {
  GRID_LOOP(i, n) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}
extern "C" __global__ void strata_gelu_backward(const float* x, const float* dy, float* dx, i64 n) {
  GRID_LOOP(i, n) {
    float v = x[i];
    float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}
extern "C" __global__ void strata_multiply(const float* a, const float* b, float* out, i64 n) {
  GRID_LOOP(i, n) out[i] = a[i] * b[i];
}
// Inverted dropout; the mask of (row, sample) depends only on (seed, first_sample + column, row).
extern "C" __global__ void strata_dropout(const float* x, float* y, float* mask, int rows, i64 n, float rate,
                                          u64 seed, i64 first_sample) {
  float keep_scale = 1.0f / (1.0f - rate);
  GRID_LOOP(k, n) {
    i64 j = k / rows;
    i64 i = k - j * rows;
    u64 column_seed = mix64(seed, u64(first_sample + j));
    float m = uniform01(mix64(column_seed, u64(i))) >= rate ? keep_scale : 0.0f;
    mask[k] = m;
    y[k] = x[k] * m;
  }
}
// One thread per sample: loss[j] = log(sum exp(z - peak)) + peak - z[label], and
// dz = grad_scale * (softmax - onehot). A label that is not a class index records the
// smallest such sample in *bad (the host names it).
extern "C" __global__ void strata_softmax_xent(const float* logits, const float* labels, float* dlogits,
                                               double* losses, int* bad, int rows, int cols, float grad_scale) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += blockDim.x * gridDim.x) {
    const float* z = logits + i64(j) * rows;
    float* d = dlogits + i64(j) * rows;
    float value = labels[j];
    if (!(value >= 0.0f && value < float(rows) && value == floorf(value))) {
      atomicMin(bad, j);
      losses[j] = 0.0;
      continue;
    }
    int label = int(value);
    float peak = z[0];
    for (int i = 1; i < rows; ++i) peak = fmaxf(peak, z[i]);
    float sum = 0.0f;
    for (int i = 0; i < rows; ++i) {
      float e = expf(z[i] - peak);
      d[i] = e;
      sum += e;
    }
    losses[j] = double(logf(sum) + peak - z[label]);
    float f = grad_scale / sum;
    for (int i = 0; i < rows; ++i) d[i] *= f;
    d[label] -= grad_scale;
  }
}
// Samples whose first largest logit is at the label's position (Eigen's maxCoeff keeps the first).
extern "C" __global__ void strata_count_correct(const float* logits, const float* labels, u64* count, int rows, int cols) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += blockDim.x * gridDim.x) {
    const float* z = logits + i64(j) * rows;
    int best = 0;
    for (int i = 1; i < rows; ++i)
      if (z[i] > z[best]) best = i;
    if (float(best) == labels[j]) atomicAdd(count, 1ull);
  }
}
// d = factor * (p - t); sums[j] = sum over the column of (p - t)^2.
extern "C" __global__ void strata_squared_error(const float* p, const float* t, float* d, double* sums, int rows,
                                                int cols, float factor) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += blockDim.x * gridDim.x) {
    double s = 0.0;
    for (int i = 0; i < rows; ++i) {
      i64 k = i64(j) * rows + i;
      float diff = p[k] - t[k];
      d[k] = diff * factor;
      s += double(diff) * double(diff);
    }
    sums[j] = s;
  }
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
// Keras' SGD (optim/sgd.hpp): plain, momentum, or Nesterov momentum.
extern "C" __global__ void strata_sgd(float* w, const float* g, float* v, i64 n, float rate, float momentum, int nesterov) {
  GRID_LOOP(i, n) {
    if (momentum == 0.0f) {
      w[i] -= rate * g[i];
    } else {
      float vi = momentum * v[i] - rate * g[i];
      v[i] = vi;
      w[i] += nesterov ? momentum * vi - rate * g[i] : vi;
    }
  }
}
// Lamb's direction (optim/lamb.hpp's Direction): bias-corrected Adam plus decoupled decay.
__device__ __forceinline__ float lamb_direction(float m, float v, float w, float m_correction, float v_correction,
                                                float epsilon, float decay) {
  return (m * m_correction) / (sqrtf(v * v_correction) + epsilon) + decay * w;
}
// Lamb's first phase (Lamb::moments): the moments, and this block's shares of sum w^2
// (partials[block]) and sum u^2 (partials[gridDim.x + block]).
extern "C" __global__ void strata_lamb_moments(const float* w, const float* g, float* m, float* v, i64 n, float beta1,
                                               float beta2, float m_correction, float v_correction, float epsilon,
                                               float decay, double* partials) {
  double weight = 0.0, update = 0.0;
  GRID_LOOP(i, n) {
    float mi = beta1 * m[i] + (1.0f - beta1) * g[i];
    float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    float u = lamb_direction(mi, vi, w[i], m_correction, v_correction, epsilon, decay);
    weight += double(w[i]) * double(w[i]);
    update += double(u) * double(u);
  }
  double weights = block_sum(weight);
  double updates = block_sum(update);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = weights;
    partials[gridDim.x + blockIdx.x] = updates;
  }
}
// Lamb's second phase (Lamb::apply): w -= rate * u, u from the moments; rate = lr * trust ratio.
extern "C" __global__ void strata_lamb_apply(float* w, const float* m, const float* v, i64 n, float rate,
                                             float m_correction, float v_correction, float epsilon, float decay) {
  GRID_LOOP(i, n) w[i] -= rate * lamb_direction(m[i], v[i], w[i], m_correction, v_correction, epsilon, decay);
}
// Adam and AdamW (optim/adam.hpp): the host folds the bias corrections into step_size and
// decoupled weight decay into keep.
extern "C" __global__ void strata_adam(float* w, const float* g, float* m, float* v, i64 n, float beta1, float beta2,
                                       float epsilon, float step_size, float keep) {
  GRID_LOOP(i, n) {
    float mi = beta1 * m[i] + (1.0f - beta1) * g[i];
    float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    w[i] = keep * w[i] - step_size * mi / (sqrtf(vi) + epsilon);
  }
}
)CUDA";

}  // namespace strata::cuda
