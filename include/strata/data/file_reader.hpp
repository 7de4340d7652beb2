#pragma once
// Reads a whole file, gzip-compressed or plain (zlib tells them apart), into memory.
// Errors name the path and, for a damaged stream, how many bytes came out before it broke.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <zlib.h>

#include "strata/core/error.hpp"

namespace strata::data {

namespace detail {
// How many bytes reading `path` will give, as a capacity to reserve: the file's size, or for
// gzip the size its trailer records (ISIZE: the last member's decompressed size modulo 2^32,
// little-endian), capped at deflate's largest ratio (1032:1). Only a hint: a file of several
// members or of 4 GiB and more records something else, and the string grows as it must.
inline std::size_t read_size_hint(std::filesystem::path const& path, std::uintmax_t file_size) {
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {};
  if (file_size < 18 || !in.read(reinterpret_cast<char*>(magic), 2) || magic[0] != 0x1f || magic[1] != 0x8b)
    return std::size_t(file_size);
  unsigned char trailer[4] = {};
  if (!in.seekg(-4, std::ios::end) || !in.read(reinterpret_cast<char*>(trailer), 4)) return std::size_t(file_size);
  std::size_t const recorded = std::size_t(trailer[0]) | std::size_t(trailer[1]) << 8 | std::size_t(trailer[2]) << 16 |
                               std::size_t(trailer[3]) << 24;
  return std::min(recorded, std::size_t(file_size) * 1032);
}
}  // namespace detail

inline std::string read_file(std::filesystem::path const& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw IoError(strata::detail::message(path.string(), ": no such file"));
  std::uintmax_t const file_size = std::filesystem::file_size(path, ec);
  std::string content;
  if (!ec) content.reserve(detail::read_size_hint(path, file_size));  // no copies as it grows
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw IoError(strata::detail::message(path.string(), ": cannot open for reading"));
  gzbuffer(file, 1 << 17);
  char chunk[1 << 16];
  for (;;) {
    int const got = gzread(file, chunk, sizeof chunk);
    if (got < 0 || (got == 0 && !gzeof(file))) {
      int code = 0;
      std::string const what = gzerror(file, &code);
      gzclose(file);
      throw IoError(strata::detail::message(path.string(), ": damaged compressed data at byte offset ", content.size(),
                                    " of the decompressed stream (", what, ")"));
    }
    content.append(chunk, std::size_t(got));
    if (got == 0) break;
  }
  int code = 0;
  std::string const what = gzerror(file, &code);
  gzclose(file);
  if (code == Z_BUF_ERROR || (code != Z_OK && code != Z_STREAM_END))
    throw IoError(strata::detail::message(path.string(), ": compressed stream ends early at byte offset ", content.size(),
                                  " of the decompressed data (", what, "); the file is truncated"));
  return content;
}

}  // namespace strata::data
