#pragma once
// strata's exceptions. Every message names the offending value and, where there is one, the fix.

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string const& message) : std::runtime_error(message) {}
};

// A tensor or dataset whose shape does not fit the model ("Dense<784,256>: input has 783 features").
class ShapeError : public Error {
  using Error::Error;
};
// Values that are out of range: a label outside the class range, an empty dataset.
class DataError : public Error {
  using Error::Error;
};
// A file that is missing, unreadable, truncated or malformed; the message has the path and byte offset.
class IoError : public Error {
  using Error::Error;
};
// A run-time configuration that cannot work: a global batch smaller than the number of replicas.
class ConfigError : public Error {
  using Error::Error;
};
// A collective that cannot complete: mismatched sizes between replicas, a replica that failed.
class CommError : public Error {
  using Error::Error;
};
// A GPU that cannot do what was asked: none present, out of device memory, a kernel that
// did not compile, a failed CUDA, cuBLAS or NVRTC call (the message names the call).
class DeviceError : public Error {
  using Error::Error;
};

namespace detail {
// Builds a message from pieces without <format> (g++ 12 lacks it).
template <class... Parts>
std::string message(Parts const&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// An error as a number and its message, so that it can cross processes (a chief that fails
// to write a checkpoint fails every worker of the job with the same error).
enum class ErrorKind : int { error, shape, data, io, config, comm, device };
inline ErrorKind kind_of(std::exception const& e) {
  if (dynamic_cast<ShapeError const*>(&e)) return ErrorKind::shape;
  if (dynamic_cast<DataError const*>(&e)) return ErrorKind::data;
  if (dynamic_cast<IoError const*>(&e)) return ErrorKind::io;
  if (dynamic_cast<ConfigError const*>(&e)) return ErrorKind::config;
  if (dynamic_cast<CommError const*>(&e)) return ErrorKind::comm;
  if (dynamic_cast<DeviceError const*>(&e)) return ErrorKind::device;
  return ErrorKind::error;
}
[[noreturn]] inline void throw_error(ErrorKind kind, std::string const& what) {
  switch (kind) {
    case ErrorKind::shape: throw ShapeError(what);
    case ErrorKind::data: throw DataError(what);
    case ErrorKind::io: throw IoError(what);
    case ErrorKind::config: throw ConfigError(what);
    case ErrorKind::comm: throw CommError(what);
    case ErrorKind::device: throw DeviceError(what);
    case ErrorKind::error: break;
  }
  throw Error(what);
}
}  // namespace detail

}  // namespace strata
