#pragma once
// Reduction operators of collectives and Strategy::reduce, and the one loop that applies them.

#include <algorithm>
#include <cstddef>

namespace strata::comm {

enum class ReduceOp { sum, mean, max, min };

// out[i] = op over peers p of peers[p][i] for i in [begin, end), summing in peer order
// 0, 1, 2, ... so the result is the same bits every run. `scale` multiplies sums (mean, or
// the 1/samples of a gradient). Writes out[0, end - begin); out must not alias a peer.
inline void reduce_range(float const* const* peers, int num_peers, std::size_t begin, std::size_t end, ReduceOp op,
                         float scale, float* out) {
  std::size_t const n = end - begin;
  float* __restrict o = out;  // never a peer, so restrict holds
  float const* first = peers[0] + begin;
  if (op == ReduceOp::max || op == ReduceOp::min) {
    std::copy_n(first, n, o);
    for (int p = 1; p < num_peers; ++p) {
      float const* __restrict src = peers[p] + begin;
      if (op == ReduceOp::max) for (std::size_t i = 0; i < n; ++i) o[i] = std::max(o[i], src[i]);
      else for (std::size_t i = 0; i < n; ++i) o[i] = std::min(o[i], src[i]);
    }
    return;
  }
  if (num_peers == 1) {
    for (std::size_t i = 0; i < n; ++i) o[i] = first[i] * scale;
    return;
  }
  float const* second = peers[1] + begin;
  for (std::size_t i = 0; i < n; ++i) o[i] = first[i] + second[i];
  for (int p = 2; p < num_peers; ++p) {
    float const* __restrict src = peers[p] + begin;
    for (std::size_t i = 0; i < n; ++i) o[i] += src[i];
  }
  if (scale != 1.0f) for (std::size_t i = 0; i < n; ++i) o[i] *= scale;
}

}  // namespace strata::comm
