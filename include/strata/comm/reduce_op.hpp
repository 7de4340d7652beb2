#pragma once
// Reduction operators of collectives and Strategy::reduce, and the one loop that applies them.

#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace strata::comm {

enum class ReduceOp { sum, mean, max, min };

namespace detail {
template <class T>
inline float widen(T value) {
  if constexpr (std::is_same_v<T, float>) return value;
  else return static_cast<float>(value);
}
}  // namespace detail

// out[i] = op over peers p of peers[p][begin + i] for i in [0, end - begin), accumulating in
// float and in peer order 0, 1, 2, ... so the result is the same bits every run, whichever
// thread computes it. `scale` multiplies sums (mean, or the 1/samples of a gradient).
// out must not alias a peer. T is float, bf16 or fp16.
template <class T>
void reduce_range(T const* const* peers, int num_peers, std::size_t begin, std::size_t end, ReduceOp op, float scale,
                  float* out) {
  using detail::widen;
  std::size_t const n = end - begin;
  float* __restrict o = out;  // never a peer, so restrict holds
  T const* first = peers[0] + begin;
  if (op == ReduceOp::max || op == ReduceOp::min) {
    for (std::size_t i = 0; i < n; ++i) o[i] = widen(first[i]);
    for (int p = 1; p < num_peers; ++p) {
      T const* __restrict src = peers[p] + begin;
      if (op == ReduceOp::max) for (std::size_t i = 0; i < n; ++i) o[i] = std::max(o[i], widen(src[i]));
      else for (std::size_t i = 0; i < n; ++i) o[i] = std::min(o[i], widen(src[i]));
    }
    return;
  }
  if (num_peers == 1) {
    for (std::size_t i = 0; i < n; ++i) o[i] = widen(first[i]) * scale;
    return;
  }
  T const* second = peers[1] + begin;
  for (std::size_t i = 0; i < n; ++i) o[i] = widen(first[i]) + widen(second[i]);
  for (int p = 2; p < num_peers; ++p) {
    T const* __restrict src = peers[p] + begin;
    for (std::size_t i = 0; i < n; ++i) o[i] += widen(src[i]);
  }
  if (scale != 1.0f) for (std::size_t i = 0; i < n; ++i) o[i] *= scale;
}

}  // namespace strata::comm
