#pragma once
// The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON, then the raw tensor bytes. Every entry of the JSON
// object except "__metadata__" is a tensor {"dtype", "shape", "data_offsets": [begin, end)}
// relative to the start of the data; "__metadata__" maps strings to strings.
//
// strata writes F32 tensors back to back in the order given, pads the header with spaces
// to a multiple of 8 (so the data is aligned), and adds a "checksum" metadata entry: the
// CRC-32 (zlib's) of the data followed by a canonical description of the header, so a
// flipped bit anywhere but the padding is detected. Python's safetensors, PyTorch and NumPy
// read the files; other tools ignore the checksum.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/dtype.hpp"
#include "strata/core/error.hpp"
#include "strata/io/atomic_file.hpp"
#include "strata/io/json.hpp"
#include "strata/nn/layer.hpp"

namespace strata::io {

static_assert(std::endian::native == std::endian::little,
              "strata::io: safetensors stores little-endian data; big-endian hosts are not supported");

using Metadata = std::map<std::string, std::string>;

// A tensor to write: F32 values in row-major order of `shape`.
struct TensorRef {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<float const> values;
};

inline constexpr std::string_view checksum_key = "checksum";
// Files larger than this in header are refused (the reference implementation's limit).
inline constexpr std::uint64_t max_header_bytes = 100'000'000;

namespace detail {

inline std::size_t dtype_bytes(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

inline std::string shape_text(std::vector<std::int64_t> const& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s.append(i ? ", " : "").append(std::to_string(shape[i]));
  return s + "]";
}

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
};

// What the checksum covers besides the data: every tensor entry in data order and every
// metadata pair except the checksum itself, one per line.
inline std::string canonical_header(std::vector<Entry> const& entries, Metadata const& metadata) {
  std::string s;
  for (auto const& e : entries) {
    s.append(e.name).append("\t").append(e.dtype).append("\t").append(shape_text(e.shape));
    s.append("\t").append(std::to_string(e.begin)).append("\t").append(std::to_string(e.end)).append("\n");
  }
  for (auto const& [key, value] : metadata)
    if (key != checksum_key) s.append(key).append("\t").append(value).append("\n");
  return s;
}

inline std::uint32_t crc32_update(std::uint32_t crc, void const* data, std::size_t size) {
  auto const* p = static_cast<Bytef const*>(data);
  while (size > 0) {  // crc32_z takes z_size_t, but stay portable to zlibs with uInt lengths
    auto const n = uInt(std::min<std::size_t>(size, std::size_t{1} << 30));
    crc = std::uint32_t(::crc32(crc, p, n));
    p += n;
    size -= n;
  }
  return crc;
}

inline std::string checksum_text(std::uint32_t crc) {
  char text[16];
  std::snprintf(text, sizeof text, "crc32:%08x", crc);
  return text;
}

}  // namespace detail

// Writes `tensors` and `metadata` to `path` atomically (see write_file_atomically). The
// data is streamed once: each piece is checksummed and handed to the disk, and the header,
// whose checksum has a fixed width, is completed in place at the end.
inline void write_safetensors(std::filesystem::path const& path, std::span<TensorRef const> tensors, Metadata metadata) {
  std::vector<detail::Entry> entries;
  entries.reserve(tensors.size());
  std::uint64_t offset = 0;
  for (auto const& t : tensors) {
    if (nn::element_count(t.shape) != t.values.size())
      throw ShapeError(strata::detail::message("write_safetensors: tensor '", t.name, "' has shape ",
                                               detail::shape_text(t.shape), " but ", t.values.size(), " values"));
    std::uint64_t const bytes = t.values.size() * sizeof(float);
    entries.push_back({t.name, "F32", t.shape, offset, offset + bytes});
    offset += bytes;
  }
  metadata.erase(std::string(checksum_key));
  std::string const canonical = detail::canonical_header(entries, metadata);
  std::set<std::string_view> names{"__metadata__"};
  for (auto const& e : entries)
    if (!names.insert(e.name).second)
      throw Error(strata::detail::message("write_safetensors: tensor name '", e.name, "' is used twice or reserved"));
  auto header_for = [&](std::uint32_t crc) {
    metadata[std::string(checksum_key)] = detail::checksum_text(crc);
    std::string json = "{\"__metadata__\":{";
    for (auto const& [key, value] : metadata)
      json.append(json.back() == '{' ? "" : ",").append(json::quote(key)).append(":").append(json::quote(value));
    json += "}";
    for (auto const& e : entries) {
      json.append(",").append(json::quote(e.name)).append(":{\"dtype\":").append(json::quote(e.dtype));
      json.append(",\"shape\":[");
      for (std::size_t i = 0; i < e.shape.size(); ++i) json.append(i ? "," : "").append(std::to_string(e.shape[i]));
      json.append("],\"data_offsets\":[").append(std::to_string(e.begin)).append(",").append(std::to_string(e.end));
      json.append("]}");
    }
    json += "}";
    json.append((8 - json.size() % 8) % 8, ' ');
    return json;
  };
  std::string const placeholder = header_for(0);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(std::uint64_t(placeholder.size()) >> (8 * i));

  write_file_atomically(path, [&](FileWriter& out) {
    out.append(std::as_bytes(std::span(length)));
    out.append(std::as_bytes(std::span(placeholder.data(), placeholder.size())));
    std::uint32_t crc = detail::crc32_update(0, nullptr, 0);
    constexpr std::size_t piece = std::size_t{4} << 20;  // checksummed while in cache, then written
    for (auto const& t : tensors) {
      auto const all = std::as_bytes(t.values);
      for (std::size_t at = 0; at < all.size(); at += piece) {
        auto const part = all.subspan(at, std::min(piece, all.size() - at));
        crc = detail::crc32_update(crc, part.data(), part.size());
        out.append(part);
      }
    }
    std::string const header = header_for(detail::crc32_update(crc, canonical.data(), canonical.size()));
    if (header.size() != placeholder.size()) throw Error("write_safetensors: the header changed length");  // cannot happen
    out.write_at(std::as_bytes(std::span(header.data(), header.size())), 8);
  });
}

// A safetensors file read into memory and validated: header structure, sizes, offsets
// that tile the data exactly, and the checksum when the file has one. Every problem is an
// IoError that names the file and what is wrong.
class SafetensorsFile {
 public:
  static SafetensorsFile read(std::filesystem::path const& path) {
    io::detail::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) throw io::detail::os_error(path, "open", errno);
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0) throw io::detail::os_error(path, "stat", errno);
    auto const size = std::uint64_t(info.st_size);
    std::string const name = path.string();
    SafetensorsFile file;
    file.source_ = name;
    unsigned char length[8] = {};
    if (size < 8) file.fail("the file is ", size, " bytes; a safetensors file starts with an 8-byte header length");
    read_exactly(fd.get(), length, 8, 0, name);
    std::uint64_t const header_bytes = file.header_length(length, size);
    std::string header(header_bytes, '\0');
    read_exactly(fd.get(), header.data(), header_bytes, 8, name);
    std::uint64_t const data_bytes = size - 8 - header_bytes;
    file.parse_header(header, data_bytes);
    file.allocate(data_bytes);
    // Read and checksum piece by piece, so each piece is summed while it is still in cache
    // and the next one is already being read ahead by the kernel.
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    std::uint32_t crc = detail::crc32_update(0, nullptr, 0);
    constexpr std::uint64_t piece = std::uint64_t{4} << 20;
    for (std::uint64_t at = 0; at < data_bytes; at += piece) {
      std::uint64_t const n = std::min(piece, data_bytes - at);
      read_exactly(fd.get(), file.data_.get() + at, n, 8 + header_bytes + at, name);
      crc = detail::crc32_update(crc, file.data_.get() + at, n);
    }
    file.verify_checksum(crc);
    return file;
  }

  // The same checks on bytes in memory; `source` names them in messages.
  static SafetensorsFile parse(std::span<std::byte const> bytes, std::string source) {
    SafetensorsFile file;
    file.source_ = std::move(source);
    if (bytes.size() < 8)
      file.fail("the file is ", bytes.size(), " bytes; a safetensors file starts with an 8-byte header length");
    unsigned char length[8];
    std::memcpy(length, bytes.data(), 8);
    std::uint64_t const header_bytes = file.header_length(length, bytes.size());
    std::string const header(reinterpret_cast<char const*>(bytes.data()) + 8, header_bytes);
    std::uint64_t const data_bytes = bytes.size() - 8 - header_bytes;
    file.parse_header(header, data_bytes);
    file.allocate(data_bytes);
    std::memcpy(file.data_.get(), bytes.data() + 8 + header_bytes, data_bytes);
    file.verify_checksum(detail::crc32_update(detail::crc32_update(0, nullptr, 0), file.data_.get(), data_bytes));
    return file;
  }

  [[nodiscard]] std::string const& source() const { return source_; }
  [[nodiscard]] Metadata const& metadata() const { return metadata_; }
  [[nodiscard]] bool has_checksum() const { return metadata_.count(std::string(checksum_key)) != 0; }
  // Tensor names in data order.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto const& e : entries_) out.push_back(e.name);
    return out;
  }
  [[nodiscard]] bool contains(std::string_view name) const { return find(name) != nullptr; }
  [[nodiscard]] std::vector<std::int64_t> shape(std::string_view name) const { return entry(name).shape; }
  [[nodiscard]] std::string const& dtype(std::string_view name) const { return entry(name).dtype; }

  // The F32 values of tensor `name`; throws IoError when it is missing or not F32, and
  // ShapeError when its shape is not `expected`.
  [[nodiscard]] std::span<float const> f32(std::string_view name, std::vector<std::int64_t> const& expected) const {
    detail::Entry const& e = entry(name);
    if (e.dtype != "F32")
      fail("tensor '", name, "' has dtype ", e.dtype, "; strata loads F32 tensors");
    if (e.shape != expected)
      throw ShapeError(strata::detail::message(source_, ": tensor '", name, "' has shape ", detail::shape_text(e.shape),
                                               ", the model expects ", detail::shape_text(expected)));
    return {reinterpret_cast<float const*>(data_.get() + e.begin), std::size_t((e.end - e.begin) / 4)};
  }

  // The values of a floating-point tensor (F32, F16 or BF16, as other tools write them) as
  // floats; IoError for any other dtype, ShapeError when its shape is not `expected`.
  [[nodiscard]] std::vector<float> floats(std::string_view name, std::vector<std::int64_t> const& expected) const {
    detail::Entry const& e = entry(name);
    if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16")
      fail("tensor '", name, "' has dtype ", e.dtype, "; strata reads F32, F16 and BF16 tensors as floats");
    if (e.shape != expected)
      throw ShapeError(strata::detail::message(source_, ": tensor '", name, "' has shape ", detail::shape_text(e.shape),
                                               ", the model expects ", detail::shape_text(expected)));
    std::byte const* at = data_.get() + e.begin;
    std::size_t const count = nn::element_count(e.shape);
    std::vector<float> out(count);
    if (e.dtype == "F32") {
      std::memcpy(out.data(), at, count * 4);
    } else {
      for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, at + 2 * i, 2);
        out[i] = e.dtype == "BF16" ? std::bit_cast<float>(std::uint32_t{bits} << 16) : fp16::to_float(bits);
      }
    }
    return out;
  }

 private:
  SafetensorsFile() = default;

  template <class... Parts>
  [[noreturn]] void fail(Parts const&... parts) const {
    throw IoError(strata::detail::message(source_, ": ", parts...));
  }

  static void read_exactly(int fd, void* out, std::uint64_t bytes, std::uint64_t offset, std::string const& name) {
    auto* p = static_cast<char*>(out);
    while (bytes > 0) {
      ssize_t const n = ::pread(fd, p, std::min<std::uint64_t>(bytes, 1u << 30), off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw io::detail::os_error(name, "read", errno);
      if (n == 0) throw IoError(strata::detail::message(name, ": the file ended early at byte ", offset, " (truncated)"));
      p += n;
      offset += std::uint64_t(n);
      bytes -= std::uint64_t(n);
    }
  }

  std::uint64_t header_length(unsigned char const (&length)[8], std::uint64_t file_size) const {
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= std::uint64_t(length[i]) << (8 * i);
    if (n > max_header_bytes) fail("the header length ", n, " exceeds the ", max_header_bytes, "-byte limit (not a safetensors file?)");
    if (n > file_size - 8)
      fail("the header length ", n, " exceeds the ", file_size - 8, " bytes after it (truncated or not a safetensors file)");
    return n;
  }

  void allocate(std::uint64_t bytes) {
    // Floats, so F32 tensors are aligned views; no zero fill, every byte is read.
    data_.reset(reinterpret_cast<std::byte*>(new float[(bytes + 3) / 4]));
  }

  void parse_header(std::string const& header, std::uint64_t data_bytes) {
    json::Value const root = json::parse(header, source_);
    if (!root.is_object()) fail("the header is not a JSON object (corrupted or not a safetensors file)");
    std::set<std::string_view> seen;
    for (auto const& [name, value] : root.members) {
      if (!seen.insert(name).second) fail("the header names '", name, "' twice");
      if (name == "__metadata__") {
        if (!value.is_object()) fail("__metadata__ is not an object of strings");
        for (auto const& [key, text] : value.members) {
          if (!text.is_string()) fail("__metadata__ entry '", key, "' is not a string");
          metadata_[key] = text.text;
        }
        continue;
      }
      entries_.push_back(parse_entry(name, value));
    }
    std::sort(entries_.begin(), entries_.end(), [](auto const& a, auto const& b) { return a.begin < b.begin; });
    std::uint64_t expected = 0;
    for (auto const& e : entries_) {
      if (e.begin != expected)
        fail("tensor '", e.name, "' starts at data byte ", e.begin, " but the previous tensor ends at ", expected,
             " (overlapping or gapped offsets)");
      expected = e.end;
    }
    if (expected != data_bytes)
      fail("the header describes ", expected, " bytes of tensor data but the file holds ", data_bytes,
           expected > data_bytes ? " (truncated)" : " (trailing bytes)");
  }

  detail::Entry parse_entry(std::string const& name, json::Value const& value) const {
    if (!value.is_object()) fail("tensor '", name, "' is not an object");
    json::Value const* dtype = value.find("dtype");
    json::Value const* shape = value.find("shape");
    json::Value const* offsets = value.find("data_offsets");
    if (!dtype || !dtype->is_string() || !shape || !shape->is_array() || !offsets || !offsets->is_array() ||
        offsets->items.size() != 2)
      fail("tensor '", name, "' needs \"dtype\" (string), \"shape\" (array) and \"data_offsets\" ([begin, end])");
    detail::Entry e;
    e.name = name;
    e.dtype = dtype->text;
    std::size_t const element = detail::dtype_bytes(e.dtype);
    if (element == 0) fail("tensor '", name, "' has an unknown dtype '", e.dtype, "'");
    constexpr std::uint64_t max_elements = std::uint64_t{1} << 40;
    std::uint64_t count = 1;
    for (auto const& d : shape->items) {
      std::uint64_t extent = 0;
      if (!d.as_size(extent, max_elements)) fail("tensor '", name, "' has a shape entry that is not a size: ", d.text);
      e.shape.push_back(std::int64_t(extent));
      if (extent != 0 && count > max_elements / extent) fail("tensor '", name, "' has more than 2^40 elements");
      count *= extent;
    }
    if (!offsets->items[0].as_size(e.begin) || !offsets->items[1].as_size(e.end))
      fail("tensor '", name, "' has a data offset that is not a byte position");
    if (e.end < e.begin || e.end - e.begin != count * element)
      fail("tensor '", name, "' of shape ", detail::shape_text(e.shape), " and dtype ", e.dtype, " needs ",
           count * element, " bytes but its data_offsets [", e.begin, ", ", e.end, ") span ",
           e.end >= e.begin ? e.end - e.begin : 0);
    if (e.dtype == "F32" && e.begin % 4 != 0) fail("tensor '", name, "' starts at byte ", e.begin, ", not a multiple of 4");
    return e;
  }

  // `data_crc`: the CRC-32 of the whole data section (which parse_header matched to the entries).
  void verify_checksum(std::uint32_t data_crc) const {
    auto const it = metadata_.find(std::string(checksum_key));
    if (it == metadata_.end()) return;
    std::uint32_t const crc = data_crc;
    std::string const canonical = detail::canonical_header(entries_, metadata_);
    std::string const actual = detail::checksum_text(detail::crc32_update(crc, canonical.data(), canonical.size()));
    if (actual != it->second)
      fail("checksum mismatch: the header records ", it->second, " but the contents give ", actual,
           " (the file is corrupted)");
  }

  detail::Entry const* find(std::string_view name) const {
    for (auto const& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  detail::Entry const& entry(std::string_view name) const {
    if (auto const* e = find(name)) return *e;
    fail("no tensor named '", name, "'");
  }

  struct FreeFloats {
    void operator()(std::byte* p) const { delete[] reinterpret_cast<float*>(p); }
  };

  std::string source_;
  Metadata metadata_;
  std::vector<detail::Entry> entries_;
  std::unique_ptr<std::byte[], FreeFloats> data_;
};

}  // namespace strata::io
