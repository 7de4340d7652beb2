#pragma once
// MpiCommunicator: the collectives across processes, over MPI (Open MPI from Debian's
// libopenmpi-dev), for use under mpirun or Slurm's srun. Link strata::mpi.
//
// Each communicator duplicates its parent (its own message space) and returns MPI errors
// instead of aborting. With `verify` on (the default) every rank first sends its peers a
// description of the call, and waits for theirs until the deadline: a rank that calls
// another collective or another size is named in a CommError on every rank before any data
// moves, a rank that never arrives ends in a CommError naming the ranks that did, and once
// all have arrived the blocking MPI call runs (a process that dies inside it is MPI's to
// report). With verify off, collectives are posted non-blocking and polled until the
// deadline, which Open MPI runs with slower algorithms (docs/communication.md has the
// figures). 16-bit types cross the wire as 16 bits: MPI has no bf16 or fp16 arithmetic,
// so strata gives it operations that widen each pair to fp32, combine and round back
// (rounding at every hop of MPI's algorithm, as NCCL does; two ranks round once).
//
// After a timeout the communicator is broken (MPI cannot cancel a collective): every later
// call throws; the processes should end. Communicators are created in the same order on
// every rank (MPI_Comm_dup is collective).

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/comm/communicator.hpp"
#include "strata/core/dtype.hpp"
#include "strata/core/error.hpp"

namespace strata::comm {

namespace detail {
inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, std::size_t(length));
}
inline char const* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

// The user operations of 16-bit reductions, over MPI_UINT16_T: inout[i] = in[i] op inout[i],
// in fp32, rounded once to T.
template <class T, ReduceOp Op>
void reduce_16bit(void* in, void* inout, int* length, MPI_Datatype*) {
  auto const* a = static_cast<T const*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) {
    float const x = float(a[i]), y = float(b[i]);
    if constexpr (Op == ReduceOp::max) b[i] = T(std::max(x, y));
    else if constexpr (Op == ReduceOp::min) b[i] = T(std::min(x, y));
    else b[i] = T(x + y);
  }
}
}  // namespace detail

// Initialises MPI for the life of the object (MPI_Init_thread ... MPI_Finalize). strata
// asks for MPI_THREAD_MULTIPLE: with Hierarchical, every replica thread has its own
// communicator and they cross processes at the same time. If MPI is already initialised,
// this checks the thread level and leaves finalising to whoever initialised it.
class MpiEnvironment {
 public:
  MpiEnvironment(int& argc, char**& argv, int required = MPI_THREAD_MULTIPLE) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Query_thread(&provided_);
    else {
      if (int rc = MPI_Init_thread(&argc, &argv, required, &provided_); rc != MPI_SUCCESS)
        throw CommError("MpiEnvironment: MPI_Init_thread failed: " + detail::mpi_error_string(rc));
      owner_ = true;
    }
    if (provided_ < required) {
      if (owner_) MPI_Finalize();
      throw CommError(std::string("MpiEnvironment: this MPI provides ") + detail::thread_level_name(provided_) +
                      " but strata asked for " + detail::thread_level_name(required) +
                      "; use an MPI built with thread support (Debian's Open MPI has it), or ask for less");
    }
  }
  MpiEnvironment(MpiEnvironment const&) = delete;
  MpiEnvironment& operator=(MpiEnvironment const&) = delete;
  ~MpiEnvironment() {
    if (owner_) MPI_Finalize();
  }
  [[nodiscard]] int thread_level() const { return provided_; }

 private:
  int provided_ = MPI_THREAD_SINGLE;
  bool owner_ = false;
};

struct MpiOptions {
  std::chrono::milliseconds timeout = default_timeout;
  bool verify = true;  // exchange call descriptions first (a few microseconds per call)
};

class MpiCommunicator {
 public:
  explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD, MpiOptions options = {}) : options_(options) {
    if (options.timeout.count() <= 0)
      throw ConfigError(strata::detail::message("MpiCommunicator: timeout ", options.timeout.count(),
                                                " ms must be positive"));
    check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check(MPI_Comm_dup(comm_, &check_comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(check_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // The 16-bit reductions' operations, made here (local, no communication) rather than in
    // a step's first collective.
    MPI_User_function* const functions[] = {
        &detail::reduce_16bit<bf16, ReduceOp::sum>, &detail::reduce_16bit<bf16, ReduceOp::max>,
        &detail::reduce_16bit<bf16, ReduceOp::min>, &detail::reduce_16bit<fp16, ReduceOp::sum>,
        &detail::reduce_16bit<fp16, ReduceOp::max>, &detail::reduce_16bit<fp16, ReduceOp::min>};
    for (std::size_t i = 0; i < ops_16bit_.size(); ++i)
      check(MPI_Op_create(functions[i], 1 /* commutative */, &ops_16bit_[i]), "MPI_Op_create");
  }
  MpiCommunicator(MpiCommunicator&& other) noexcept { swap(other); }
  MpiCommunicator& operator=(MpiCommunicator&& other) noexcept {
    swap(other);
    return *this;
  }
  ~MpiCommunicator() {
    if (broken_) return;  // requests may still be pending on it: leave it to MPI_Finalize
    for (MPI_Op& op : ops_16bit_)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    if (check_comm_ != MPI_COMM_NULL) MPI_Comm_free(&check_comm_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] MPI_Comm native() const { return comm_; }
  void set_timeout(std::chrono::milliseconds timeout) { options_.timeout = timeout; }

  template <Reducible T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    all_reduce(std::span<T const>(data), data, op);
  }
  template <Reducible T>
  void all_reduce(std::span<T const> in, std::span<T> out, ReduceOp op) {
    auto const call = begin_call(describe_call<T>(Collective::all_reduce, in.size(), out.size(), op));
    if constexpr (std::is_same_v<T, float>) {
      for (std::size_t at = 0; at < in.size(); at += max_count) {  // MPI counts are ints
        int const n = int(std::min(max_count, in.size() - at));
        void const* send = in.data() == out.data() ? MPI_IN_PLACE : static_cast<void const*>(in.data() + at);
        run(call, [&](MPI_Request* r) { return MPI_Iallreduce(send, out.data() + at, n, MPI_FLOAT, mpi_op(op), comm_, r); },
            [&] { return MPI_Allreduce(send, out.data() + at, n, MPI_FLOAT, mpi_op(op), comm_); });
      }
      if (op == ReduceOp::mean) scale(out, 1.0f / float(size_));
    } else {
      MPI_Op const reduce = op_16bit<T>(op);
      for (std::size_t at = 0; at < in.size(); at += max_count) {
        int const n = int(std::min(max_count, in.size() - at));
        void const* send = in.data() == out.data() ? MPI_IN_PLACE : static_cast<void const*>(in.data() + at);
        run(call,
            [&](MPI_Request* r) { return MPI_Iallreduce(send, out.data() + at, n, MPI_UINT16_T, reduce, comm_, r); },
            [&] { return MPI_Allreduce(send, out.data() + at, n, MPI_UINT16_T, reduce, comm_); });
      }
      if (op == ReduceOp::mean) scale(out, 1.0f / float(size_));
    }
  }

  template <Reducible T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, ReduceOp op) {
    auto const call = begin_call(describe_call<T>(Collective::reduce_scatter, in.size(), out.size(), op));
    int const n = count(call, out.size());
    if constexpr (std::is_same_v<T, float>) {
      run(call,
          [&](MPI_Request* r) {
            return MPI_Ireduce_scatter_block(in.data(), out.data(), n, MPI_FLOAT, mpi_op(op), comm_, r);
          },
          [&] { return MPI_Reduce_scatter_block(in.data(), out.data(), n, MPI_FLOAT, mpi_op(op), comm_); });
      if (op == ReduceOp::mean) scale(out, 1.0f / float(size_));
    } else {
      MPI_Op const reduce = op_16bit<T>(op);
      run(call,
          [&](MPI_Request* r) {
            return MPI_Ireduce_scatter_block(in.data(), out.data(), n, MPI_UINT16_T, reduce, comm_, r);
          },
          [&] { return MPI_Reduce_scatter_block(in.data(), out.data(), n, MPI_UINT16_T, reduce, comm_); });
      if (op == ReduceOp::mean) scale(out, 1.0f / float(size_));
    }
  }

  // `in` may be this rank's block of `out` (in place).
  template <Movable T>
  void all_gather(std::span<T const> in, std::span<T> out) {
    auto const call = begin_call(describe_call<T>(Collective::all_gather, in.size(), out.size()));
    int const n = count(call, in.size());
    void const* send = in.data() == out.data() + std::size_t(rank_) * in.size() ? MPI_IN_PLACE : in.data();
    run(call,
        [&](MPI_Request* r) { return MPI_Iallgather(send, n, mpi_type<T>(), out.data(), n, mpi_type<T>(), comm_, r); },
        [&] { return MPI_Allgather(send, n, mpi_type<T>(), out.data(), n, mpi_type<T>(), comm_); });
  }

  template <Movable T>
  void broadcast(std::span<T> data, int root) {
    auto const call = begin_call(describe_call<T>(Collective::broadcast, data.size(), data.size(), ReduceOp::sum, root));
    for (std::size_t at = 0; at < data.size(); at += max_count) {
      int const n = int(std::min(max_count, data.size() - at));
      run(call, [&](MPI_Request* r) { return MPI_Ibcast(data.data() + at, n, mpi_type<T>(), root, comm_, r); },
          [&] { return MPI_Bcast(data.data() + at, n, mpi_type<T>(), root, comm_); });
    }
  }

  void barrier() {
    auto const call = begin_call(CallDescriptor{});
    run(call, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); }, [&] { return MPI_Barrier(comm_); });
  }

 private:
  static constexpr std::size_t max_count = std::size_t(1) << 30;
  static constexpr int descriptor_words = 7;
  using Descriptor = std::array<std::int64_t, descriptor_words>;

  template <class T>
  static MPI_Datatype mpi_type() {
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, std::byte>) return MPI_BYTE;
    else return MPI_UINT16_T;
  }
  static MPI_Op mpi_op(ReduceOp op) {
    return op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM;
  }
  // The user operation of a 16-bit reduction (sum serves mean).
  template <class T>
  MPI_Op op_16bit(ReduceOp op) const {
    std::size_t const kind = op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;
    return ops_16bit_[(std::is_same_v<T, fp16> ? 3 : 0) + kind];
  }

  void swap(MpiCommunicator& other) noexcept {
    std::swap(comm_, other.comm_);
    std::swap(check_comm_, other.check_comm_);
    std::swap(rank_, other.rank_);
    std::swap(size_, other.size_);
    std::swap(options_, other.options_);
    std::swap(broken_, other.broken_);
    std::swap(sequence_, other.sequence_);
    ops_16bit_.swap(other.ops_16bit_);
    std::swap(sent_, other.sent_);  // a moved-from communicator has no request pending
    table_.swap(other.table_);
    arrived_.swap(other.arrived_);
    receives_.swap(other.receives_);
    sends_.swap(other.sends_);
  }

  template <class T>
  static void scale(std::span<T> out, float factor) {
    for (auto& x : out) x = T(float(x) * factor);
  }

  int count(CallDescriptor const& call, std::size_t n) const {
    if (n > std::size_t(INT_MAX))
      throw CommError(prefix(call) + std::to_string(n) + " elements per rank exceed MPI's int count; split the call");
    return int(n);
  }

  std::string prefix(CallDescriptor const& call) const {
    return strata::detail::message("MpiCommunicator: ", call.describe(), " (collective #", sequence_, ") on rank ",
                                   rank_, " of ", size_, ": ");
  }

  void check(int rc, char const* what) const {
    if (rc != MPI_SUCCESS) throw CommError(std::string("MpiCommunicator: ") + what + " failed: " + detail::mpi_error_string(rc));
  }

  // Refuses a broken communicator; with verify, compares the call with every peer's first.
  CallDescriptor begin_call(CallDescriptor const& call) {
    ++sequence_;
    if (broken_)
      throw CommError(prefix(call) + "this communicator is broken by an earlier timeout or MPI error; end the process");
    if (options_.verify && size_ > 1) verify(call);
    else if (std::string const problem = malformed(call, size_); !problem.empty())
      throw CommError(prefix(call) + problem);  // unverified peers learn of it only by their timeout
    return call;
  }

  // Every rank sends every peer its descriptor and receives theirs (point to point, so a
  // timeout knows exactly which ranks arrived). The same table gives the same verdict on
  // every rank. Buffers are members: a send still pending after a timeout stays valid.
  void verify(CallDescriptor const& call) {
    std::size_t const peers = std::size_t(size_ - 1);
    sent_ = encode(call);
    table_.resize(std::size_t(size_));
    arrived_.assign(std::size_t(size_), 0);
    receives_.resize(peers);
    sends_.resize(peers);
    table_[std::size_t(rank_)] = sent_;
    arrived_[std::size_t(rank_)] = 1;
    for (int r = 0, i = 0; r < size_; ++r) {
      if (r == rank_) continue;
      check(MPI_Irecv(table_[std::size_t(r)].data(), descriptor_words, MPI_INT64_T, r, 0, check_comm_, &receives_[std::size_t(i)]),
            "MPI_Irecv");
      check(MPI_Isend(sent_.data(), descriptor_words, MPI_INT64_T, r, 0, check_comm_, &sends_[std::size_t(i)]), "MPI_Isend");
      ++i;
    }
    auto const deadline = std::chrono::steady_clock::now() + options_.timeout;
    for (std::size_t pending = peers; pending > 0;) {
      for (int r = 0, i = 0; r < size_; ++r) {
        if (r == rank_) continue;
        int done = 0;
        if (!arrived_[std::size_t(r)]) {
          check(MPI_Test(&receives_[std::size_t(i)], &done, MPI_STATUS_IGNORE), "MPI_Test");
          if (done) {
            arrived_[std::size_t(r)] = 1;
            --pending;
          }
        }
        ++i;
      }
      if (pending > 0 && std::chrono::steady_clock::now() >= deadline) throw arrival_timeout(call);
    }
    check(MPI_Waitall(int(peers), sends_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    bool same = true;
    for (auto const& d : table_) same = same && d == sent_;
    std::string const problem = malformed(call, size_);
    if (same && problem.empty()) return;
    if (same) throw CommError(prefix(call) + problem);
    throw CommError(prefix(call) + detail::mismatch_report(size_, [&](int r) { return decode(table_[std::size_t(r)]); }));
  }

  CommError arrival_timeout(CallDescriptor const& call) {
    broken_ = true;
    for (int r = 0, i = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (!arrived_[std::size_t(r)]) {
        MPI_Cancel(&receives_[std::size_t(i)]);
        MPI_Request_free(&receives_[std::size_t(i)]);
      }
      ++i;
    }
    return CommError(prefix(call) + detail::timeout_report(
                                        options_.timeout, size_, [&](int r) { return arrived_[std::size_t(r)] != 0; },
                                        [&](int r) { return decode(table_[std::size_t(r)]); }));
  }

  Descriptor encode(CallDescriptor const& c) const {
    return {sequence_, std::int64_t(c.kind), std::int64_t(c.type), std::int64_t(c.op), c.root, std::int64_t(c.input),
            std::int64_t(c.output)};
  }
  static CallDescriptor decode(Descriptor const& d) {
    return {Collective(d[1]), ElementType(d[2]), ReduceOp(d[3]), int(d[4]), std::size_t(d[5]), std::size_t(d[6])};
  }

  // Verified, every rank has arrived with matching arguments: the blocking call (Open MPI's
  // tuned algorithms, up to 2x faster than its non-blocking ones for large messages).
  // Unverified, the non-blocking one, polled against the deadline.
  template <class Post, class Blocking>
  void run(CallDescriptor const& call, Post post, Blocking blocking) {
    if (options_.verify || size_ == 1) {
      if (int rc = blocking(); rc != MPI_SUCCESS) {
        broken_ = true;
        throw CommError(prefix(call) + detail::mpi_error_string(rc));
      }
      return;
    }
    post_and_wait(call, post);
  }

  // Posts one non-blocking collective and polls it until done or the deadline.
  template <class Post>
  void post_and_wait(CallDescriptor const& call, Post post) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (int rc = post(&request); rc != MPI_SUCCESS) {
      broken_ = true;
      throw CommError(prefix(call) + detail::mpi_error_string(rc));
    }
    auto const deadline = std::chrono::steady_clock::now() + options_.timeout;
    for (unsigned polls = 0;; ++polls) {
      int done = 0;
      if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
        broken_ = true;
        throw CommError(prefix(call) + detail::mpi_error_string(rc));
      }
      if (done) return;
      if (polls % 256 == 255 && std::chrono::steady_clock::now() >= deadline) {
        broken_ = true;
        throw CommError(prefix(call) + "timed out after " + detail::seconds_text(options_.timeout) +
                        "; verify is off, so which ranks arrived is unknown (turn it on to see)");
      }
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm check_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  MpiOptions options_;
  bool broken_ = false;
  std::int64_t sequence_ = 0;
  std::array<MPI_Op, 6> ops_16bit_{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL,
                                  MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // bf16 then fp16: sum, max, min
  // verify's buffers, reused
  Descriptor sent_{};
  std::vector<Descriptor> table_;
  std::vector<char> arrived_;
  std::vector<MPI_Request> receives_, sends_;
};

}  // namespace strata::comm
