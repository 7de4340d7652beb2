#pragma once
// A matrix of seeded uniform values in [-0.5, 0.5): the GEMM tests' operands.

#include "strata.hpp"

inline strata::Matrix random_matrix(strata::Rng& rng, int rows, int cols) {
  strata::Matrix m(rows, cols);
  for (int i = 0; i < m.size(); ++i) m.data()[i] = rng.uniform() - 0.5f;
  return m;
}
