#pragma once
// Seeded weight initialisers for Dense.

#include <cmath>
#include <cstddef>

#include "strata/core/random.hpp"

namespace strata::nn {

// Glorot (Xavier) uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)). Keras' default.
struct GlorotUniform {
  static void fill(float* w, std::size_t n, int fan_in, int fan_out, Rng& rng) {
    float const limit = std::sqrt(6.0f / float(fan_in + fan_out));
    for (std::size_t i = 0; i < n; ++i) w[i] = (2.0f * rng.uniform() - 1.0f) * limit;
  }
};

// He (Kaiming) uniform: U(-l, l), l = sqrt(6 / fan_in). Suits ReLU networks.
struct HeUniform {
  static void fill(float* w, std::size_t n, int fan_in, int, Rng& rng) {
    float const limit = std::sqrt(6.0f / float(fan_in));
    for (std::size_t i = 0; i < n; ++i) w[i] = (2.0f * rng.uniform() - 1.0f) * limit;
  }
};

}  // namespace strata::nn
