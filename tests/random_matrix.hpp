#pragma once
// A matrix of seeded uniform values in [-0.5, 0.5): the GEMM tests' operands; and a dataset
// of such features, 20 wide, with 5 classes (the multi-worker tests').

#include <cstdint>
#include <vector>

#include "strata.hpp"

inline strata::Matrix random_matrix(strata::Rng& rng, int rows, int cols) {
  strata::Matrix m(rows, cols);
  for (int i = 0; i < m.size(); ++i) m.data()[i] = rng.uniform() - 0.5f;
  return m;
}

inline strata::data::Dataset synthetic(int samples, std::uint64_t seed = 11) {
  strata::Rng rng(seed);
  strata::Matrix x = random_matrix(rng, 20, samples);
  std::vector<std::int32_t> labels;
  for (int j = 0; j < samples; ++j) labels.push_back(std::int32_t(rng() % 5));
  return {std::move(x), labels};
}
