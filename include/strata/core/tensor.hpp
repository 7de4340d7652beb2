#pragma once
// Tensors. Host data lives in Eigen matrices; backends see plain views.
//
// Layout: a batch is a column-major `features × samples` matrix, so one sample is one
// contiguous column and a run of samples (a replica's shard) is one contiguous block.

#include <cstddef>

#include "strata/core/eigen.hpp"

namespace strata {

// Column-major float matrix: rows are features, columns are samples.
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
using Vector = Eigen::Matrix<float, Eigen::Dynamic, 1>;

// A column-major view with leading dimension == rows. Plain data, so a device backend
// (and nvcc) can take it without Eigen.
struct MatrixView {
  float* data = nullptr;
  int rows = 0;
  int cols = 0;
  [[nodiscard]] std::size_t size() const { return std::size_t(rows) * std::size_t(cols); }
  [[nodiscard]] MatrixView columns(int first, int count) const {
    return {data + std::size_t(first) * std::size_t(rows), rows, count};
  }
};

struct ConstMatrixView {
  float const* data = nullptr;
  int rows = 0;
  int cols = 0;
  ConstMatrixView() = default;
  ConstMatrixView(float const* d, int r, int c) : data(d), rows(r), cols(c) {}
  ConstMatrixView(MatrixView v) : data(v.data), rows(v.rows), cols(v.cols) {}  // NOLINT: views widen to const
  [[nodiscard]] std::size_t size() const { return std::size_t(rows) * std::size_t(cols); }
  [[nodiscard]] ConstMatrixView columns(int first, int count) const {
    return {data + std::size_t(first) * std::size_t(rows), rows, count};
  }
};

inline MatrixView view(Matrix& m) { return {m.data(), int(m.rows()), int(m.cols())}; }
inline ConstMatrixView view(Matrix const& m) { return {m.data(), int(m.rows()), int(m.cols())}; }

namespace detail {
inline Eigen::Map<Matrix> eigen(MatrixView v) { return {v.data, v.rows, v.cols}; }
inline Eigen::Map<Matrix const> eigen(ConstMatrixView v) { return {v.data, v.rows, v.cols}; }
}  // namespace detail

}  // namespace strata
