#pragma once
// Reads a whole file, gzip-compressed or plain (zlib tells them apart), into memory.
// Errors name the path and, for a damaged stream, how many bytes came out before it broke.

#include <cstddef>
#include <filesystem>
#include <string>

#include <zlib.h>

#include "strata/core/error.hpp"

namespace strata::data {

inline std::string read_file(std::filesystem::path const& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw IoError(strata::detail::message(path.string(), ": no such file"));
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw IoError(strata::detail::message(path.string(), ": cannot open for reading"));
  gzbuffer(file, 1 << 17);
  std::string content;
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
