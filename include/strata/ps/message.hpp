#pragma once
// The messages between ParameterServer's workers and servers: one fixed header and a payload
// of numbers (weights, or a gradient: fp32, or bf16/fp16 under Compress<T>) or of text (an
// error), in one ZeroMQ frame. The header
// carries the job's fingerprint (ps::Partition::fingerprint), so a message of another job,
// another model or another program is rejected by name, and every length is checked against
// the frame before anything is read: a malformed frame is an error reply, never a crash.
// Numbers travel in the machine's byte order; strata's machines are all little-endian x86.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include <zmq.hpp>

#include "strata/core/dtype.hpp"
#include "strata/core/error.hpp"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* address);
extern "C" void __tsan_release(void* address);
#endif

namespace strata::ps {

// ThreadSanitizer cannot see how libzmq (not instrumented) hands a message's memory from
// the sending thread to the receiving one over inproc://; these two tell it, so that it
// still checks everything else. They compile to nothing without TSan.
inline void handing_over(zmq::message_t const& message) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(message.data()));
#else
  (void)message;
#endif
}
inline void taken_over(zmq::message_t const& message) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(message.data()));
#else
  (void)message;
#endif
}

enum class Kind : std::uint16_t {
  pull = 1,     // worker -> server: send me your weights
  weights = 2,  // server -> worker: the weights, at `version`
  push = 3,     // worker -> server: the gradient of step `step`, computed on weights at `version`
  applied = 4,  // server -> worker: applied (or applied before); `version` is the server's now
  stale = 5,    // server -> worker: not applied, older than the staleness bound allows
  error = 6,    // either way: the request could not be served; the payload says why
  // Between the chief and the processes of a multi-process job (ps/job.hpp):
  ready = 7,    // worker -> chief: idle, send me a step
  task = 8,     // chief -> worker: train step `step`
  done = 9,     // worker -> chief: step `step` applied; the payload is its StepReport
  stop = 10,    // chief -> worker or server: the job is over, exit
  snapshot = 11,  // chief -> server: your weights and optimizer state (a `weights` answer), for a checkpoint
};
inline constexpr std::uint16_t last_kind = 11;

inline char const* name(Kind k) {
  switch (k) {
    case Kind::pull: return "pull";
    case Kind::weights: return "weights";
    case Kind::push: return "push";
    case Kind::applied: return "applied";
    case Kind::stale: return "stale";
    case Kind::error: return "error";
    case Kind::ready: return "ready";
    case Kind::task: return "task";
    case Kind::done: return "done";
    case Kind::stop: return "stop";
    case Kind::snapshot: return "snapshot";
  }
  return "unknown";
}

// What a payload's numbers are: fp32, or the 16 bits a gradient crosses in under Compress<T>.
enum class Element : std::uint16_t { f32 = 0, bf16 = 1, fp16 = 2 };
inline constexpr std::uint16_t last_element = 2;
template <class T>
inline constexpr Element element_of = std::is_same_v<T, bf16> ? Element::bf16 : std::is_same_v<T, fp16> ? Element::fp16 : Element::f32;
inline std::size_t element_size(Element e) { return e == Element::f32 ? 4 : 2; }
inline char const* name(Element e) { return e == Element::f32 ? "fp32" : e == Element::bf16 ? "bf16" : "fp16"; }

struct Header {
  static constexpr std::uint32_t strata_magic = 0x53505453;  // "STPS"
  static constexpr std::uint16_t current_protocol = 2;       // 2: `element` (16-bit pushes)

  std::uint32_t magic = strata_magic;
  std::uint16_t protocol = current_protocol;
  Kind kind = Kind::error;
  std::uint64_t job = 0;     // the partition's fingerprint
  std::int32_t sender = -1;  // the worker's index (servers answer as -1)
  std::int16_t server = 0;   // the server the request is for (ps::Partition allows at most 32,767)
  Element element = Element::f32;  // the payload's numbers
  std::int64_t step = -1;    // push: the step the gradient belongs to
  std::int64_t version = 0;  // see Kind
  std::uint64_t count = 0;   // payload: numbers, or bytes of text for an error
};
static_assert(sizeof(Header) == 48, "ps::Header is sent as its bytes");

// `socket` listening on, or connected to, `address`; a port in use or a malformed address
// is a CommError that names the address, what was being set up and ZeroMQ's reason.
inline void listen_on(zmq::socket_t& socket, std::string const& address, char const* who) {
  try {
    socket.bind(address);
  } catch (zmq::error_t const& e) {
    throw CommError(strata::detail::message("ps: the ", who, " cannot listen on ", address, ": ", e.what(),
                                            " (is another process using that port?)"));
  }
}
inline void connect_to(zmq::socket_t& socket, std::string const& address, char const* who) {
  try {
    socket.connect(address);
  } catch (zmq::error_t const& e) {
    throw CommError(strata::detail::message("ps: the ", who, " cannot connect to ", address, ": ", e.what()));
  }
}

namespace detail {
// The header (its `count` set to `count`) and then `bytes`, in one frame.
inline zmq::message_t frame(Header header, std::uint64_t count, void const* bytes, std::size_t size) {
  header.count = count;
  zmq::message_t message(sizeof(Header) + size);
  std::memcpy(message.data(), &header, sizeof(Header));
  if (size > 0) std::memcpy(static_cast<std::byte*>(message.data()) + sizeof(Header), bytes, size);
  return message;
}
}  // namespace detail

// One message made from a header and its payload of numbers (fp32, bf16 or fp16).
template <class T>
  requires is_compute_type<T>
zmq::message_t encode(Header header, std::span<T const> numbers) {
  header.element = element_of<T>;
  return detail::frame(header, numbers.size(), numbers.data(), numbers.size_bytes());
}
inline zmq::message_t encode(Header header, std::span<float const> floats) { return encode<float>(header, floats); }
inline zmq::message_t encode_error(Header header, std::string_view text) {
  header.kind = Kind::error;
  return detail::frame(header, text.size(), text.data(), text.size());
}

// A received frame whose header and length were checked: `job` is the fingerprint it must carry.
class Message {
 public:
  Message(zmq::message_t const& frame, std::uint64_t job) : frame_(&frame) {
    auto fail = [&](auto const&... what) {
      throw CommError(strata::detail::message("ps: rejected a message of ", frame.size(), " bytes: ", what...));
    };
    if (frame.size() < sizeof(Header)) fail("shorter than the ", sizeof(Header), "-byte header");
    std::memcpy(&header_, frame.data(), sizeof(Header));
    if (header_.magic != Header::strata_magic) fail("not a strata ParameterServer message (magic ", header_.magic, ")");
    if (header_.protocol != Header::current_protocol)
      fail("protocol ", header_.protocol, ", but this build speaks ", Header::current_protocol,
           "; run the same strata on every process of the job");
    auto const k = static_cast<std::uint16_t>(header_.kind);
    if (k < 1 || k > last_kind) fail("unknown kind ", k);
    if (static_cast<std::uint16_t>(header_.element) > last_element)
      fail("unknown element type ", static_cast<std::uint16_t>(header_.element));
    std::size_t const unit = header_.kind == Kind::error ? 1 : element_size(header_.element);
    if (header_.count > (frame.size() - sizeof(Header)) / unit || sizeof(Header) + header_.count * unit != frame.size())
      fail("its header announces ", header_.count, header_.kind == Kind::error ? " bytes" : " numbers of ",
           header_.kind == Kind::error ? "" : name(header_.element), " but the frame holds ",
           frame.size() - sizeof(Header), " bytes after the header");
    if (header_.job != job)
      fail("it belongs to job ", header_.job, ", not ", job,
           " (another model, another number of servers, or another program)");
  }

  [[nodiscard]] Header const& header() const { return header_; }
  // The payload's numbers (of header().element).
  [[nodiscard]] std::size_t floats() const { return header_.kind == Kind::error ? 0 : std::size_t(header_.count); }
  // Numbers [first, first + out.size()) of the payload, widened to `out` (the frame need not be aligned).
  void copy_floats(std::size_t first, std::span<float> out) const {
    switch (header_.element) {
      case Element::f32: std::memcpy(out.data(), payload(first), out.size_bytes()); return;
      case Element::bf16: widen<bf16>(first, out); return;
      case Element::fp16: widen<fp16>(first, out); return;
    }
  }
  // The payload's bytes from number `first` on.
  [[nodiscard]] std::byte const* payload(std::size_t first = 0) const {
    return static_cast<std::byte const*>(frame_->data()) + sizeof(Header) + first * element_size(header_.element);
  }
  [[nodiscard]] std::string text() const {
    if (header_.kind != Kind::error) return {};
    return {static_cast<char const*>(frame_->data()) + sizeof(Header), std::size_t(header_.count)};
  }

 private:
  // load<T> where the frame holds the numbers aligned (ZeroMQ's large frames do); else each
  // number copied out first.
  template <class T>
  void widen(std::size_t first, std::span<float> out) const {
    std::byte const* at = payload(first);
    if (reinterpret_cast<std::uintptr_t>(at) % alignof(T) == 0) {
      load(out.data(), reinterpret_cast<T const*>(at), out.size());
      return;
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      T value;
      std::memcpy(&value.bits, at + i * sizeof(T), sizeof(T));
      out[i] = float(value);
    }
  }

  zmq::message_t const* frame_;
  Header header_{};
};

}  // namespace strata::ps
