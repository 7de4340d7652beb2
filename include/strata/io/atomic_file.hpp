#pragma once
// Crash-safe file replacement: the bytes go to a temporary file in the same directory,
// which is fsync'ed, renamed over the target, and the directory fsync'ed. A crash at any
// moment leaves either the old file or the complete new one, never a torn one; a failed
// write removes its temporary file and leaves the target untouched.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
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

inline void write_all(int fd, std::span<std::byte const> bytes, std::filesystem::path const& path) {
  std::byte const* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    ssize_t const n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw os_error(path, "write", errno);
    }
    p += n;
    left -= std::size_t(n);
  }
}

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

// Writes `pieces` (in order) as the new content of `target`, atomically and durably.
// Throws IoError naming the file and the system error; on error the target is unchanged.
inline void write_file_atomically(std::filesystem::path const& target, std::span<std::span<std::byte const> const> pieces) {
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
      for (auto piece : pieces) detail::write_all(fd.get(), piece, temp);
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
