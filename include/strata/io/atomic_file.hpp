#pragma once
// Crash-safe file replacement: the bytes go to a temporary file in the same directory,
// which is fsync'ed, renamed over the target, and the directory fsync'ed. A crash at any
// moment leaves either the old file or the complete new one, never a torn one; a failed
// write removes its temporary file and leaves the target untouched.

#include <fcntl.h>  // open, sync_file_range (Linux)
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <cstdint>
#include <span>
#include <string>

#include "strata/core/error.hpp"

namespace strata::io {

namespace detail {

inline IoError os_error(std::filesystem::path const& path, char const* what, int error) {
  return IoError(strata::detail::message(path.string(), ": ", what, " failed: ", std::strerror(error)));
}

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd const&) = delete;
  Fd& operator=(Fd const&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }
  // Closes now, so a failing close (delayed write errors on some file systems) is reported.
  int close() {
    int const rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

inline void fsync_directory(std::filesystem::path const& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) throw os_error(dir, "open directory", errno);
  if (::fsync(fd.get()) != 0) throw os_error(dir, "fsync directory", errno);
}

// A name no other process or thread writing into the same directory uses.
inline std::filesystem::path temporary_sibling(std::filesystem::path const& target) {
  static std::atomic<std::uint64_t> counter{0};  // distinct names for threads of one process
  std::string name = ".";
  name.append(target.filename().string()).append(".tmp-").append(std::to_string(::getpid()));
  name.append("-").append(std::to_string(counter.fetch_add(1)));
  return target.parent_path() / name;
}

}  // namespace detail

// What write_file_atomically's `fill` writes through. Appended bytes are handed to the
// disk in the background every few MiB (sync_file_range), so the caller's computation on
// the next piece (a checksum) overlaps the disk's work instead of waiting for fsync.
class FileWriter {
 public:
  FileWriter(int fd, std::filesystem::path const& path) : fd_(fd), path_(&path) {}

  void append(std::span<std::byte const> bytes) {
    write_at(bytes, end_);
    end_ += bytes.size();
    if (end_ - flushed_ >= writeback_bytes) {
      ::sync_file_range(fd_, off_t(flushed_), off_t(end_ - flushed_), SYNC_FILE_RANGE_WRITE);  // a hint; errors surface in fsync
      flushed_ = end_;
    }
  }

  // Overwrites bytes already appended (a header completed after the data).
  void write_at(std::span<std::byte const> bytes, std::uint64_t offset) {
    std::byte const* p = bytes.data();
    std::size_t left = bytes.size();
    while (left > 0) {
      ssize_t const n = ::pwrite(fd_, p, left, off_t(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw detail::os_error(*path_, "write", errno);
      }
      p += n;
      offset += std::uint64_t(n);
      left -= std::size_t(n);
    }
  }

  [[nodiscard]] std::uint64_t size() const { return end_; }

  static constexpr std::uint64_t writeback_bytes = std::uint64_t{8} << 20;

 private:
  int fd_;
  std::filesystem::path const* path_;
  std::uint64_t end_ = 0;
  std::uint64_t flushed_ = 0;
};

// Makes `fill(FileWriter&)` the new content of `target`, atomically and durably. Throws
// IoError naming the file and the system error (and passes on what `fill` throws); on
// error the target is unchanged and the temporary file removed.
template <class Fill>
void write_file_atomically(std::filesystem::path const& target, Fill&& fill) {
  std::filesystem::path const dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::filesystem::path const temp = detail::temporary_sibling(dir / target.filename());
  {
    int const flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    int raw = ::open(temp.c_str(), flags, 0644);
    if (raw < 0 && errno == EEXIST) {  // left by a killed process whose pid this one reuses
      ::unlink(temp.c_str());
      raw = ::open(temp.c_str(), flags, 0644);
    }
    detail::Fd fd(raw);
    if (fd.get() < 0) throw detail::os_error(temp, "create", errno);
    try {
      FileWriter writer(fd.get(), temp);
      fill(writer);
      if (::fsync(fd.get()) != 0) throw detail::os_error(temp, "fsync", errno);
      if (fd.close() != 0) throw detail::os_error(temp, "close", errno);
    } catch (...) {
      ::unlink(temp.c_str());
      throw;
    }
  }
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    int const error = errno;
    ::unlink(temp.c_str());
    throw detail::os_error(target, "rename of the completed temporary file", error);
  }
  detail::fsync_directory(dir);
}

// True for the temporary files write_file_atomically leaves behind when its process is
// killed mid-write; they are never valid content and can be removed.
inline bool is_abandoned_temporary(std::filesystem::path const& path) {
  std::string const name = path.filename().string();
  return name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos;
}

}  // namespace strata::io
