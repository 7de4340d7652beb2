#pragma once
// TensorBoard event files: `Event` protocol buffers (profile/tensorboard_event.proto, through
// Debian's Protocol Buffers library) framed as TFRecords:
//
//   uint64 length | uint32 masked_crc32c(length) | length bytes of Event | uint32 masked_crc32c(data)
//
// all little-endian. EventFileWriter appends scalars; read_event_file reads a file back,
// checking every CRC (what the tests use; TensorBoard reads the same bytes).
// Needs the strata::tensorboard CMake target.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/profile/crc32c.hpp"
#include "strata/profile/tensorboard_event.pb.h"

namespace strata::profile {

namespace detail {
inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFFu));
}
inline std::uint64_t get_le(char const* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
inline std::span<std::byte const> bytes_of(char const* p, std::size_t n) { return {reinterpret_cast<std::byte const*>(p), n}; }
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace detail

// One TFRecord around `data`.
inline std::string tf_record(std::string const& data) {
  std::string out;
  out.reserve(data.size() + 16);
  detail::put_le(out, data.size(), 8);
  detail::put_le(out, masked_crc32c(detail::bytes_of(out.data(), 8)), 4);
  out += data;
  detail::put_le(out, masked_crc32c(detail::bytes_of(data.data(), data.size())), 4);
  return out;
}

// Appends events to a new file `events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2` in `dir`
// (created if missing). The first event names the format, as TensorFlow's writer does.
class EventFileWriter {
 public:
  explicit EventFileWriter(std::filesystem::path const& dir) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error)
      throw IoError(strata::detail::message("TensorBoard: cannot create the log directory ", dir, ": ", error.message()));
    static std::atomic<int> counter{0};
    char host[256] = "localhost";
    ::gethostname(host, sizeof host - 1);
    path_ = dir / strata::detail::message("events.out.tfevents.", std::int64_t(detail::unix_seconds()), '.', host, '.',
                                          ::getpid(), '.', counter.fetch_add(1), ".v2");
    file_.open(path_, std::ios::binary | std::ios::trunc);
    if (!file_) throw IoError(strata::detail::message("TensorBoard: cannot create the event file ", path_));
    tensorboard::Event event;
    event.set_wall_time(detail::unix_seconds());
    event.set_file_version("brain.Event:2");
    write(event);
    flush();
  }

  // One scalar `tag` = `value` at `step`.
  void scalar(std::string const& tag, std::int64_t step, double value) {
    tensorboard::Event event;
    event.set_wall_time(detail::unix_seconds());
    event.set_step(step);
    auto* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(float(value));
    v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("scalars");
    write(event);
  }

  void flush() {
    file_.flush();
    if (!file_) throw IoError(strata::detail::message("TensorBoard: writing ", path_, " failed (disk full?)"));
  }

  [[nodiscard]] std::filesystem::path const& path() const { return path_; }

 private:
  void write(tensorboard::Event const& event) {
    std::string data;
    if (!event.SerializeToString(&data)) throw Error("TensorBoard: an event could not be serialised");
    std::string const record = tf_record(data);
    file_.write(record.data(), std::streamsize(record.size()));
    if (!file_) throw IoError(strata::detail::message("TensorBoard: writing ", path_, " failed (disk full?)"));
  }

  std::filesystem::path path_;
  std::ofstream file_;
};

// One event read back: its time, step, and either the file version or its scalars.
struct EventRecord {
  double wall_time = 0.0;
  std::int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;  // tag, simple_value
};

// Every event of a TensorBoard event file. A wrong CRC, a record cut short or bytes that are
// no Event are a DataError naming the file and the byte offset.
inline std::vector<EventRecord> read_event_file(std::filesystem::path const& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(strata::detail::message("read_event_file: cannot open ", path));
  std::string const bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<EventRecord> out;
  std::size_t at = 0;
  auto fail = [&](char const* what) {
    return DataError(strata::detail::message("read_event_file: ", path, " at byte ", at, ": ", what));
  };
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) throw fail("a record header cut short");
    std::uint64_t const length = detail::get_le(bytes.data() + at, 8);
    if (std::uint32_t(detail::get_le(bytes.data() + at + 8, 4)) != masked_crc32c(detail::bytes_of(bytes.data() + at, 8)))
      throw fail("the length's CRC does not match (not a TFRecord file, or corrupted)");
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) throw fail("a record cut short");
    char const* data = bytes.data() + at + 12;
    if (std::uint32_t(detail::get_le(data + length, 4)) != masked_crc32c(detail::bytes_of(data, length)))
      throw fail("the data's CRC does not match (corrupted)");
    tensorboard::Event event;
    if (!event.ParseFromArray(data, int(length))) throw fail("the record is not an Event protocol buffer");
    EventRecord record{event.wall_time(), event.step(), event.file_version(), {}};
    if (event.has_summary())
      for (auto const& v : event.summary().value())
        if (v.value_case() == tensorboard::Summary::Value::kSimpleValue) record.scalars.emplace_back(v.tag(), v.simple_value());
    out.push_back(std::move(record));
    at += 12 + length + 4;
  }
  return out;
}

}  // namespace strata::profile
