#pragma once
// The IDX format of (Fashion-)MNIST, gzip-compressed or plain:
//   bytes 0-1 zero, byte 2 type code (0x08 = unsigned byte), byte 3 number of dimensions,
//   then one big-endian uint32 per dimension, then the data in row-major order.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/data/dataset.hpp"
#include "strata/data/file_reader.hpp"

namespace strata::data {

struct IdxArray {
  std::vector<std::size_t> dims;
  std::vector<std::uint8_t> values;  // row-major
};

// An IDX file's dimensions and where its data lie in its bytes, every size checked against
// them; `path` is only for messages.
struct IdxLayout {
  std::vector<std::size_t> dims;
  std::size_t offset = 0;  // of the first data byte
  std::size_t count = 0;   // data bytes: the product of the dimensions

  // The first data byte of `bytes`, the file these were parsed from.
  [[nodiscard]] std::uint8_t const* values_in(std::string const& bytes) const {
    return reinterpret_cast<std::uint8_t const*>(bytes.data()) + offset;
  }
};

inline IdxLayout parse_idx_layout(std::string const& bytes, std::string const& path) {
  auto fail = [&](std::size_t offset, auto const&... what) -> IdxLayout {
    throw IoError(strata::detail::message(path, ": byte offset ", offset, ": ", what...));
  };
  if (bytes.size() < 4) return fail(bytes.size(), "file ends inside the 4-byte IDX header (", bytes.size(), " bytes)");
  auto const* p = reinterpret_cast<unsigned char const*>(bytes.data());
  if (p[0] != 0 || p[1] != 0) return fail(0, "not an IDX file (the first two bytes must be zero)");
  if (p[2] != 0x08)
    return fail(2, "IDX type code 0x", std::hex, int(p[2]), std::dec, " is not supported; only unsigned bytes (0x08)");
  std::size_t const rank = p[3];
  if (rank == 0) return fail(3, "IDX file declares zero dimensions");
  std::size_t const header = 4 + 4 * rank;
  if (bytes.size() < header)
    return fail(bytes.size(), "file ends inside the dimension list (", rank, " dimensions need ", header, " bytes)");
  IdxLayout layout{.dims = {}, .offset = header, .count = 1};
  for (std::size_t d = 0; d < rank; ++d) {
    unsigned char const* q = p + 4 + 4 * d;
    std::size_t const n = (std::size_t(q[0]) << 24) | (std::size_t(q[1]) << 16) | (std::size_t(q[2]) << 8) | q[3];
    layout.dims.push_back(n);
    layout.count *= n;
    if (layout.count > (std::size_t{1} << 40)) return fail(4 + 4 * d, "dimension sizes multiply to more than 2^40 values");
  }
  std::size_t const count = layout.count;
  if (bytes.size() < header + count)
    return fail(bytes.size(), "file is truncated: the dimensions promise ", count, " data bytes after the ", header,
                "-byte header, the file ends after ", bytes.size() - header);
  if (bytes.size() > header + count)
    return fail(header + count, bytes.size() - header - count, " unexpected bytes after the data");
  return layout;
}

// Parses IDX bytes already in memory; `path` is only for messages.
inline IdxArray parse_idx(std::string const& bytes, std::string const& path) {
  IdxLayout layout = parse_idx_layout(bytes, path);
  std::uint8_t const* const data = layout.values_in(bytes);
  return {std::move(layout.dims), std::vector<std::uint8_t>(data, data + layout.count)};
}

inline IdxArray read_idx(std::filesystem::path const& path) { return parse_idx(read_file(path), path.string()); }

// Images (n x rows x cols) and labels (n) as a Dataset: one column of rows*cols features per
// image, scaled by `scale` (1/255 maps pixels to [0, 1]).
inline Dataset load_idx(std::filesystem::path const& images_path, std::filesystem::path const& labels_path,
                        float scale = 1.0f / 255.0f) {
  // The values are converted from the files' bytes as read: no copy of them in between.
  std::string const image_bytes = read_file(images_path);
  IdxLayout const images = parse_idx_layout(image_bytes, images_path.string());
  std::string const label_bytes = read_file(labels_path);
  IdxLayout const labels = parse_idx_layout(label_bytes, labels_path.string());
  if (images.dims.size() < 2)
    throw IoError(strata::detail::message(images_path.string(), ": byte offset 3: an image file needs at least 2 dimensions, it has ",
                                  images.dims.size()));
  if (labels.dims.size() != 1)
    throw IoError(strata::detail::message(labels_path.string(), ": byte offset 3: a label file needs 1 dimension, it has ",
                                  labels.dims.size()));
  std::size_t const n = images.dims[0];
  if (labels.dims[0] != n)
    throw DataError(strata::detail::message(images_path.string(), " has ", n, " images but ", labels_path.string(), " has ",
                                    labels.dims[0], " labels"));
  std::size_t const width = n ? images.count / n : 0;
  Matrix features{Eigen::Index(width), Eigen::Index(n)};
  float* const out = features.data();
  std::uint8_t const* const pixels = images.values_in(image_bytes);
  for (std::size_t i = 0; i < images.count; ++i) out[i] = float(pixels[i]) * scale;
  Matrix targets(1, Eigen::Index(n));
  std::uint8_t const* const label_values = labels.values_in(label_bytes);
  for (std::size_t i = 0; i < n; ++i) targets(0, Eigen::Index(i)) = float(label_values[i]);
  return {std::move(features), std::move(targets)};
}

}  // namespace strata::data
