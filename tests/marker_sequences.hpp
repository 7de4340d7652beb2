#pragma once
// Token sequences for the small BERTs of the tests: 3 to 6 of 6 tokens ([CLS] = 2, word
// pieces 7..22, [SEP] = 3), padded with id 0, whose class is whether token 5 or token 6
// appears (learnable from the tokens). Vocabulary 23.

#include <cstdint>
#include <vector>

#include "strata.hpp"

struct MarkerSequences {
  strata::Matrix ids;                 // 6 x n, a column per sample
  std::vector<std::int32_t> classes;  // 0 or 1
};

inline MarkerSequences marker_sequences(int n, std::uint64_t seed = 4) {
  strata::Rng rng(seed);
  MarkerSequences out{strata::Matrix::Zero(6, n), std::vector<std::int32_t>(std::size_t(n), 0)};
  for (int s = 0; s < n; ++s) {
    int const length = 3 + int(rng() % 4);
    auto& cls = out.classes[std::size_t(s)];
    cls = int(rng() % 2);
    out.ids(0, s) = 2;
    for (int t = 1; t + 1 < length; ++t) out.ids(t, s) = float(7 + rng() % 16);
    out.ids(1 + int(rng() % std::uint64_t(length - 2)), s) = float(5 + cls);
    out.ids(length - 1, s) = 3;
  }
  return out;
}
