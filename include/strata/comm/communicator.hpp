#pragma once
// The Communicator concept: the collectives every engine offers (threads of one process,
// MPI processes, NCCL GPUs, and the hierarchy of two), on contiguous spans of float, bf16
// and fp16. Reductions of 16-bit types accumulate in fp32 and round once.
//
// Every collective is called by every rank of the communicator, in the same order, with
// matching arguments. A rank that does not arrive within the timeout, or arguments that do
// not match, end in a CommError on the ranks that did arrive; nothing hangs.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "strata/comm/reduce_op.hpp"
#include "strata/core/dtype.hpp"
#include "strata/core/error.hpp"

namespace strata::comm {

// Element types a collective can reduce.
template <class T>
concept Reducible = std::same_as<T, float> || std::same_as<T, bf16> || std::same_as<T, fp16>;
// Element types a collective can move (all-gather, broadcast): the reducible ones and bytes.
template <class T>
concept Movable = Reducible<T> || std::same_as<T, std::byte>;

// Generous by default: a replica may compute for minutes between two collectives.
inline constexpr std::chrono::milliseconds default_timeout = std::chrono::minutes(10);

template <class C>
concept Communicator = requires(C& c, std::span<float> f, std::span<float const> cf, std::span<bf16> h,
                                std::span<bf16 const> ch, std::span<fp16> g, std::span<fp16 const> cg,
                                std::span<std::byte> b, std::span<std::byte const> cb, ReduceOp op) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.all_reduce(f, op);
  c.all_reduce(cf, f, op);
  c.all_reduce(h, op);
  c.all_reduce(ch, h, op);
  c.all_reduce(g, op);
  c.all_reduce(cg, g, op);
  c.reduce_scatter(cf, f, op);
  c.reduce_scatter(ch, h, op);
  c.all_gather(cf, f);
  c.all_gather(cb, b);
  c.broadcast(f, 0);
  c.broadcast(b, 0);
  c.barrier();
};

enum class Collective : std::uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  barrier,
  reduce_owned,  // the two halves of an in-process all_reduce (ThreadCommunicator)
  share_owned,
};
enum class ElementType : std::uint8_t { f32, bf16, fp16, byte };

template <class T>
inline constexpr ElementType element_type = std::same_as<T, float>  ? ElementType::f32
                                            : std::same_as<T, bf16> ? ElementType::bf16
                                            : std::same_as<T, fp16> ? ElementType::fp16
                                                                    : ElementType::byte;

inline char const* name(Collective c) {
  constexpr char const* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                   "barrier",    "reduce_owned",   "share_owned"};
  return names[int(c)];
}
inline char const* name(ElementType t) {
  constexpr char const* names[] = {"float", "bf16", "fp16", "byte"};
  return names[int(t)];
}
inline char const* name(ReduceOp op) {
  constexpr char const* names[] = {"sum", "mean", "max", "min"};
  return names[int(op)];
}

// What one rank passed to one collective: compared across ranks, and named in errors.
struct CallDescriptor {
  Collective kind = Collective::barrier;
  ElementType type = ElementType::f32;
  ReduceOp op = ReduceOp::sum;  // reductions only
  int root = 0;                 // broadcast only
  std::size_t input = 0;        // elements in
  std::size_t output = 0;       // elements out

  // Everything but sizes must be equal on every rank; sizes are checked per collective.
  [[nodiscard]] bool same_call(CallDescriptor const& other) const {
    return kind == other.kind && type == other.type && op == other.op && root == other.root;
  }
  [[nodiscard]] std::string describe() const {
    std::string s = name(kind);
    if (kind == Collective::all_reduce || kind == Collective::reduce_scatter || kind == Collective::reduce_owned) s += std::string("(") + name(op) + ")";
    if (kind == Collective::broadcast) s += "(root " + std::to_string(root) + ")";
    if (kind == Collective::barrier) return s;
    s += " of " + std::to_string(input) + " " + name(type);
    if (input != output) s += " into " + std::to_string(output);
    return s;
  }
};

template <Movable T>
CallDescriptor describe_call(Collective kind, std::size_t input, std::size_t output, ReduceOp op = ReduceOp::sum,
                             int root = 0) {
  return {kind, element_type<T>, op, root, input, output};
}

// The sizes a collective needs on a communicator of `ranks`, or an empty string when the
// call is well-formed: out-of-place all_reduce in == out, reduce_scatter in == ranks*out,
// all_gather out == ranks*in, broadcast root in range.
inline std::string malformed(CallDescriptor const& call, int ranks) {
  auto const n = std::size_t(ranks);
  switch (call.kind) {
    case Collective::all_reduce:
    case Collective::reduce_owned:
      if (call.input != call.output)
        return "input has " + std::to_string(call.input) + " elements but output " + std::to_string(call.output) +
               "; " + name(call.kind) + " needs equal sizes";
      break;
    case Collective::reduce_scatter:
      if (call.input != n * call.output)
        return "input has " + std::to_string(call.input) + " elements; reduce_scatter over " + std::to_string(ranks) +
               " ranks into " + std::to_string(call.output) + " needs " + std::to_string(n * call.output);
      break;
    case Collective::all_gather:
      if (call.output != n * call.input)
        return "output has " + std::to_string(call.output) + " elements; all_gather of " + std::to_string(call.input) +
               " from " + std::to_string(ranks) + " ranks needs " + std::to_string(n * call.input);
      break;
    case Collective::broadcast:
      if (call.root < 0 || call.root >= ranks)
        return "root " + std::to_string(call.root) + " is not a rank (0.." + std::to_string(ranks - 1) + ")";
      break;
    case Collective::barrier:
    case Collective::share_owned: break;
  }
  return {};
}

// The parts of the errors every engine raises, worded once.
namespace detail {
inline std::string seconds_text(std::chrono::milliseconds t) {
  return std::to_string(t.count() / 1000) + "." + std::to_string(t.count() % 1000 / 100) + " s";
}

// "timed out after 0.3 s; arrived: 0 (all_reduce(sum) of 100 float); never arrived: 1. ..."
// arrived(r) says whether rank r arrived; call_of(r) is what it called (read only if it did).
template <class Arrived, class CallOf>
std::string timeout_report(std::chrono::milliseconds timeout, int ranks, Arrived arrived, CallOf call_of) {
  std::string present, missing;
  for (int r = 0; r < ranks; ++r) {
    if (arrived(r)) present += (present.empty() ? "" : ", ") + std::to_string(r) + " (" + call_of(r).describe() + ")";
    else missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  return "timed out after " + seconds_text(timeout) + "; arrived: " + present + "; never arrived: " + missing +
         ". Every rank must call the same collectives in the same order; set_timeout (StrategyOptions::timeout "
         "for a Trainer or Strategy) sets a longer wait";
}

// "ranks called different collectives or sizes (rank 0: ...; rank 1: ...). ..."
template <class CallOf>
std::string mismatch_report(int ranks, CallOf call_of) {
  std::string calls;
  for (int r = 0; r < ranks; ++r) calls += (r ? "; rank " : "rank ") + std::to_string(r) + ": " + call_of(r).describe();
  return "ranks called different collectives or sizes (" + calls +
         "). Every rank must call the same collectives, with the same sizes, in the same order";
}
}  // namespace detail

}  // namespace strata::comm
