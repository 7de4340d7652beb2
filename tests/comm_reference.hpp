#pragma once
// The serial reference every communicator's collectives are checked against. Each rank's
// inputs are a function of (rank, element, salt), so every rank can compute the expected
// result for all ranks locally, without communicating.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "strata/comm/communicator.hpp"
#include "strata/core/random.hpp"

namespace strata::test {

template <class T>
struct Fill {
  // Random values in [-1, 1) with full mantissas, so that summation order shows in the bits.
  static T value(int rank, std::size_t i, std::uint64_t salt = 0) {
    std::uint64_t const h = mix64(mix64(salt, std::uint64_t(rank)), i);
    return T(float(std::int64_t(h >> 40) - (std::int64_t(1) << 23)) / float(1 << 23));
  }
  static std::vector<T> values(int rank, std::size_t n, std::uint64_t salt = 0) {
    std::vector<T> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = value(rank, i, salt);
    return out;
  }
};

// op over ranks 0..n-1 of get(rank), accumulated in float in rank order, scaled for mean.
template <class Get>
float reduce_in_rank_order(int n, comm::ReduceOp op, Get get) {
  float acc = get(0);
  for (int p = 1; p < n; ++p) {
    float const v = get(p);
    acc = op == comm::ReduceOp::max ? std::max(acc, v) : op == comm::ReduceOp::min ? std::min(acc, v) : acc + v;
  }
  if (op == comm::ReduceOp::mean) acc *= 1.0f / float(n);
  return acc;
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// How far a result may be from the rank-order reference: 0 for engines that sum in rank
// order; otherwise a relative bound for a different summation order (MPI with >2 ranks).
struct Tolerance {
  float relative = 0;
  template <class T>
  bool accepts(T got, float expected_value, float magnitude) const {
    if (relative == 0) return same_bits(got, T(expected_value));
    return std::abs(float(got) - float(T(expected_value))) <= relative * magnitude + 1e-30f;
  }
};

// Runs every collective on `comm` (called on every rank) and counts wrong elements.
template <class T, class Comm>
void check_collectives(Comm& comm, std::span<std::size_t const> sizes, std::span<comm::ReduceOp const> ops,
                       Tolerance tolerance = {}) {
  using comm::ReduceOp;
  int const n = comm.size(), me = comm.rank();
  std::uint64_t salt = 1;
  for (std::size_t m : sizes) {
    CAPTURE(m);
    for (ReduceOp op : ops) {
      CAPTURE(int(op));
      ++salt;
      auto expected = [&](std::size_t i, std::size_t offset) {
        return reduce_in_rank_order(n, op, [&](int p) { return float(Fill<T>::value(p, offset + i, salt)); });
      };
      auto magnitude = [&](std::size_t i, std::size_t offset) {
        return reduce_in_rank_order(n, ReduceOp::sum,
                                    [&](int p) { return std::abs(float(Fill<T>::value(p, offset + i, salt))); });
      };
      std::size_t wrong = 0;
      std::vector<T> data = Fill<T>::values(me, m, salt);
      comm.all_reduce(std::span<T>(data), op);
      for (std::size_t i = 0; i < m; ++i) wrong += !tolerance.accepts(data[i], expected(i, 0), magnitude(i, 0));
      CHECK_MESSAGE(wrong == 0, "in-place all_reduce");

      std::vector<T> const in = Fill<T>::values(me, m, salt);
      std::vector<T> out(m);
      comm.all_reduce(std::span<T const>(in), std::span<T>(out), op);
      wrong = 0;
      for (std::size_t i = 0; i < m; ++i) wrong += !tolerance.accepts(out[i], expected(i, 0), magnitude(i, 0));
      CHECK_MESSAGE(wrong == 0, "out-of-place all_reduce");

      std::vector<T> const blocks = Fill<T>::values(me, m * std::size_t(n), salt);
      std::vector<T> mine(m);
      comm.reduce_scatter(std::span<T const>(blocks), std::span<T>(mine), op);
      wrong = 0;
      std::size_t const offset = std::size_t(me) * m;
      for (std::size_t i = 0; i < m; ++i)
        wrong += !tolerance.accepts(mine[i], expected(i, offset), magnitude(i, offset));
      CHECK_MESSAGE(wrong == 0, "reduce_scatter");
    }
    ++salt;
    std::vector<T> const in = Fill<T>::values(me, m, salt);
    std::vector<T> gathered(m * std::size_t(n));
    comm.all_gather(std::span<T const>(in), std::span<T>(gathered));
    std::size_t wrong = 0;
    for (int p = 0; p < n; ++p)
      for (std::size_t i = 0; i < m; ++i)
        wrong += !same_bits(gathered[std::size_t(p) * m + i], Fill<T>::value(p, i, salt));
    CHECK_MESSAGE(wrong == 0, "all_gather");

    int const root = int(m % std::size_t(n));
    std::vector<T> data = Fill<T>::values(me, m, salt);
    comm.broadcast(std::span<T>(data), root);
    wrong = 0;
    for (std::size_t i = 0; i < m; ++i) wrong += !same_bits(data[i], Fill<T>::value(root, i, salt));
    CHECK_MESSAGE(wrong == 0, "broadcast");

    std::vector<std::byte> bytes(m, std::byte(me));
    comm.broadcast(std::span<std::byte>(bytes), root);
    wrong = 0;
    for (auto b : bytes) wrong += b != std::byte(root);
    CHECK_MESSAGE(wrong == 0, "byte broadcast");
  }
  comm.barrier();
}

}  // namespace strata::test
