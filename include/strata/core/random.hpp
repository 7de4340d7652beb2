#pragma once
// Seeded, counter-based randomness. A value depends only on (seed, counter), never on
// which thread asks or in what order, so a sharded run draws the same numbers as a
// single replica (dropout masks, shuffles, initialisation).

#include <cstdint>

namespace strata {

// SplitMix64 finaliser: a fast, well-mixed 64-bit hash.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr std::uint64_t mix64(std::uint64_t a, std::uint64_t b) { return mix64(a ^ mix64(b)); }

// Uniform in [0, 1) from 24 random bits.
constexpr float uniform01(std::uint64_t bits) { return float(bits >> 40) * (1.0f / 16777216.0f); }

// A small sequential generator (for initialisation and shuffles), satisfying UniformRandomBitGenerator.
class Rng {
 public:
  using result_type = std::uint64_t;
  explicit constexpr Rng(std::uint64_t seed) : state_(seed) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  constexpr result_type operator()() { return mix64(state_++); }
  constexpr float uniform() { return uniform01((*this)()); }

 private:
  std::uint64_t state_;
};

}  // namespace strata
