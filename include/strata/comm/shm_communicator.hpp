#pragma once
// ShmCommunicator: the collectives among the processes of one machine, through a segment of
// POSIX shared memory that all of them map. An all_reduce works as ThreadCommunicator's
// does, with a copy each way for what crosses processes: each rank copies the parts of its
// input that other ranks own into its staging area of the segment; after a barrier, each
// reduces the slice it owns from its own input and every other rank's staging area, in rank
// order and chunk by chunk in L1, writing the result to its own output and back into the
// other staging areas; after a second barrier, each copies the others' results out. Calls
// larger than a staging area go in pieces of it. The sums are in rank order: the same bits
// on every run.
//
// The barrier is a Rendezvous placed in the segment, waiting on process-shared futexes: a
// rank that stops is named in a CommError after the timeout, as among threads, and a
// mismatched call is a CommError on every rank.
//
// One rank creates the segment and the others open it by name; once all have, the name can
// be unlinked (the mappings stay), so that a crash leaves nothing behind in /dev/shm.
// ProcessCommunicator (comm/process_communicator.hpp) does this over MPI.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "strata/comm/communicator.hpp"
#include "strata/comm/rendezvous.hpp"
#include "strata/comm/thread_communicator.hpp"
#include "strata/core/error.hpp"

namespace strata::comm {

// A named POSIX shared-memory segment, mapped into this process for the object's life.
class SharedSegment {
 public:
  SharedSegment() = default;
  SharedSegment(SharedSegment&& other) noexcept { swap(other); }
  SharedSegment& operator=(SharedSegment&& other) noexcept {
    swap(other);
    return *this;
  }
  ~SharedSegment() {
    if (data_) ::munmap(data_, bytes_);
    unlink();
  }

  // Makes the segment (the name must be new) with every page reserved now: a /dev/shm too
  // small for it is this CommError, not a SIGBUS at the first write.
  static SharedSegment create(std::string const& name, std::size_t bytes) {
    int const fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw error("create", name, bytes, errno);
    SharedSegment s;
    s.name_ = name;  // unlinked by the destructor if anything below throws
    if (::ftruncate(fd, off_t(bytes)) != 0) {
      int const e = errno;
      ::close(fd);
      throw error("size", name, bytes, e);
    }
    if (int const e = ::posix_fallocate(fd, 0, off_t(bytes)); e != 0) {
      ::close(fd);
      throw error("reserve", name, bytes, e);
    }
    s.map(fd, bytes);
    return s;
  }

  // Maps a segment another process creates, waiting until `deadline` for it to appear at
  // its full size.
  static SharedSegment open(std::string const& name, std::size_t bytes, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      int const fd = ::shm_open(name.c_str(), O_RDWR, 0);
      if (fd >= 0) {
        struct stat st {};
        if (::fstat(fd, &st) == 0 && std::size_t(st.st_size) == bytes) {
          SharedSegment s;
          s.map(fd, bytes);
          return s;
        }
        ::close(fd);
        if (st.st_size != 0)  // sized once, by the creator: another size is another layout
          throw CommError(strata::detail::message("ShmCommunicator: shared-memory segment ", name, " has ", st.st_size,
                                                  " bytes but this rank expects ", bytes,
                                                  "; every rank must give the same size and options"));
      } else if (errno != ENOENT) {
        throw error("open", name, bytes, errno);
      }
      if (std::chrono::steady_clock::now() >= deadline)
        throw CommError("ShmCommunicator: shared-memory segment " + name + " of " + std::to_string(bytes) +
                        " bytes did not appear before the timeout; the rank that creates it must run too");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Removes the name; the mappings stay valid. Only the creator holds a name to remove.
  void unlink() {
    if (!name_.empty()) ::shm_unlink(name_.c_str());
    name_.clear();
  }

  [[nodiscard]] std::byte* data() const { return static_cast<std::byte*>(data_); }
  [[nodiscard]] std::size_t size() const { return bytes_; }

 private:
  void map(int fd, std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int const e = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw error("map", "the segment", bytes, e);
    data_ = p;
    bytes_ = bytes;
  }
  void swap(SharedSegment& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    name_.swap(other.name_);
  }
  static CommError error(char const* what, std::string const& name, std::size_t bytes, int e) {
    return CommError(strata::detail::message(
        "ShmCommunicator: could not ", what, " shared-memory segment ", name, " of ", bytes, " bytes: ",
        std::strerror(e),
        e == ENOSPC || e == ENOMEM
            ? "; /dev/shm is too small (a container's default is 64 MB: docker run --shm-size=1g), or set "
              "STRATA_SHM_DISABLE=1 to use MPI between the processes of a machine"
            : ""));
  }

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::string name_;  // set while this process created the name and has not unlinked it
};

struct ShmOptions {
  std::chrono::milliseconds timeout = default_timeout;
  // Per rank. Larger calls go in pieces; 1 MiB keeps a piece in L2 while it is reduced.
  std::size_t staging_bytes = std::size_t{1} << 20;
};

class ShmCommunicator {
 public:
  // Rank 0 makes the segment under `name` (a new name, "/strata-..."); ranks 1..size-1 open
  // it, waiting up to the timeout for it to appear.
  static ShmCommunicator create(std::string const& name, int size, ShmOptions options = {}) {
    check(size, 0, options);
    return ShmCommunicator(SharedSegment::create(name, bytes_for(size, options)), 0, size, options, true);
  }
  static ShmCommunicator open(std::string const& name, int rank, int size, ShmOptions options = {}) {
    check(size, rank, options);
    auto const deadline = std::chrono::steady_clock::now() + options.timeout;
    return ShmCommunicator(SharedSegment::open(name, bytes_for(size, options), deadline), rank, size, options, false);
  }

  // Removes the segment's name once every rank has opened it (on the rank that created it).
  void unlink() { segment_.unlink(); }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return world_->size(); }
  void set_timeout(std::chrono::milliseconds timeout) { world_->set_timeout(timeout); }

  template <Reducible T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    all_reduce(std::span<T const>(data), data, op);
  }
  // Out of place; `in` may be `out`. Each piece is split among the ranks, who all reduce
  // at once. Only what other ranks reduce goes through the staging areas: a rank reads its
  // own slice from `in` and writes its result to `out` directly.
  template <Reducible T>
  void all_reduce(std::span<T const> in, std::span<T> out, ReduceOp op) {
    auto const call = describe_call<T>(Collective::all_reduce, in.size(), out.size(), op);
    bool const ok = well_formed(call);
    int const n = size();
    in_pieces(in.size(), staging_ / sizeof(T), [&](std::size_t at, std::size_t m) {
      if (ok)
        for (int r = 0; r < n; ++r)
          if (Slice const s = owned_slice(m, n, r); r != rank_)
            copy(in.data() + at + s.begin, s.size(), staging<T>(rank_) + s.begin);
      meet(call, [&] {
        Slice const mine = owned_slice(m, n, rank_);
        auto const [ins, outs] = pointers<T>(mine.begin, in.data() + at + mine.begin, out.data() + at + mine.begin);
        reduce_slice(ins, n, {0, mine.size()}, 0, op, outs, n);
      });
      for (int r = 0; r < n; ++r)
        if (Slice const s = owned_slice(m, n, r); r != rank_)
          copy(staging<T>(rank_) + s.begin, s.size(), out.data() + at + s.begin);
    });
  }

  // in: size() blocks of out.size() elements; rank r receives op over ranks of block r.
  // Each rank stages the blocks others receive and reads its own from `in`.
  template <Reducible T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, ReduceOp op) {
    auto const call = describe_call<T>(Collective::reduce_scatter, in.size(), out.size(), op);
    bool const ok = well_formed(call);
    std::size_t const n = std::size_t(size()), block = out.size();
    in_pieces(block, staging_ / (n * sizeof(T)), [&](std::size_t at, std::size_t m) {
      if (ok)
        for (std::size_t b = 0; b < n; ++b)
          if (b != std::size_t(rank_)) copy(in.data() + b * block + at, m, staging<T>(rank_) + b * m);
      meet(call, [&] {
        std::size_t const mine = std::size_t(rank_);
        auto const [ins, outs] = pointers<T>(mine * m, in.data() + mine * block + at, out.data() + at);
        reduce_slice(ins, size(), {0, m}, 0, op, outs + rank_, 1);
      });
    });
  }

  // out: size() blocks of in.size() elements; block r is rank r's input. `in` may be this
  // rank's block of `out`.
  template <Movable T>
  void all_gather(std::span<T const> in, std::span<T> out) {
    auto const call = describe_call<T>(Collective::all_gather, in.size(), out.size());
    bool const ok = well_formed(call);
    in_pieces(in.size(), staging_ / sizeof(T), [&](std::size_t at, std::size_t m) {
      if (ok) copy(in.data() + at, m, staging<T>(rank_));
      meet(call, [&] {
        for (int r = 0; r < size(); ++r) copy(staging<T>(r), m, out.data() + std::size_t(r) * in.size() + at);
      });
    });
  }

  // Afterwards every rank's `data` holds root's.
  template <Movable T>
  void broadcast(std::span<T> data, int root) {
    auto const call = describe_call<T>(Collective::broadcast, data.size(), data.size(), ReduceOp::sum, root);
    bool const ok = well_formed(call);
    in_pieces(data.size(), staging_ / sizeof(T), [&](std::size_t at, std::size_t m) {
      if (ok && rank_ == root) copy(data.data() + at, m, staging<T>(root));
      meet(call, [&] {
        if (rank_ != root) copy(staging<T>(root), m, data.data() + at);
      });
    });
  }

  // The two halves of all_reduce, for Hierarchical<ShmCommunicator, Global> across
  // machines. After reduce_owned, `out` holds the result on owned_slice(size, size(),
  // rank()) only; share_owned then copies every other rank's slice of its `data` into this
  // one's. Each piece takes a part of every rank's slice, so all ranks reduce at once.
  template <Reducible T>
  void reduce_owned(std::span<T const> in, std::span<T> out, ReduceOp op) {
    auto const call = describe_call<T>(Collective::reduce_owned, in.size(), out.size(), op);
    bool const ok = well_formed(call);
    std::size_t const n = std::size_t(size());
    slice_pieces(in.size(), staging_ / (n * sizeof(T)), [&](std::size_t offset, std::size_t q) {
      if (ok)
        for (int r = 0; r < size(); ++r) {
          Slice const part = piece_of(in.size(), r, offset, q);
          if (r != rank_) copy(in.data() + part.begin, part.size(), staging<T>(rank_) + std::size_t(r) * q);
        }
      meet(call, [&] {
        Slice const part = piece_of(in.size(), rank_, offset, q);
        auto const [ins, outs] = pointers<T>(std::size_t(rank_) * q, in.data() + part.begin, out.data() + part.begin);
        reduce_slice(ins, size(), {0, part.size()}, 0, op, outs + rank_, 1);
      });
    });
  }
  template <Reducible T>
  void share_owned(std::span<T> data) {
    auto const call = describe_call<T>(Collective::share_owned, data.size(), data.size());  // always well-formed
    slice_pieces(data.size(), staging_ / sizeof(T), [&](std::size_t offset, std::size_t q) {
      Slice const mine = piece_of(data.size(), rank_, offset, q);
      copy(data.data() + mine.begin, mine.size(), staging<T>(rank_));
      meet(call, [&] {
        for (int r = 0; r < size(); ++r) {
          Slice const part = piece_of(data.size(), r, offset, q);
          if (r != rank_) copy(staging<T>(r), part.size(), data.data() + part.begin);
        }
      });
    });
  }

  void barrier() {
    meet(CallDescriptor{}, [] {});
  }

 private:
  static constexpr std::uint64_t magic = 0x5354524154415348;  // "STRATASH"
  static constexpr std::size_t page = 4096;

  // The segment: header, the rendezvous's state and slots, then one staging area per rank.
  struct Header {
    std::atomic<std::uint64_t> ready{0};  // `magic` once the creator has built everything
    std::int64_t size = 0;
    std::uint64_t staging_bytes = 0;
  };
  static constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
  static std::size_t staging_bytes(ShmOptions const& o) { return round_up(o.staging_bytes, page); }
  static std::size_t state_offset() { return round_up(sizeof(Header), 64); }
  static std::size_t slots_offset() { return round_up(state_offset() + sizeof(Rendezvous::State), 64); }
  static std::size_t staging_offset(int size) {
    return round_up(slots_offset() + std::size_t(size) * sizeof(Rendezvous::Slot), page);
  }
  static std::size_t bytes_for(int size, ShmOptions const& o) {
    return staging_offset(size) + std::size_t(size) * staging_bytes(o);
  }
  static void check(int size, int rank, ShmOptions const& o) {
    if (size < 1 || rank < 0 || rank >= size)
      throw ConfigError(strata::detail::message("ShmCommunicator: rank ", rank, " of ", size,
                                                " is not a rank (size must be at least 1, rank in 0..size-1)"));
    if (o.staging_bytes < 256 || staging_bytes(o) < std::size_t(size) * sizeof(float))
      throw ConfigError(strata::detail::message("ShmCommunicator: staging_bytes ", o.staging_bytes, " is too small for ",
                                                size, " ranks; give at least ", std::max<std::size_t>(256, std::size_t(size) * 4),
                                                " (the default is 1 MiB)"));
    if (o.timeout.count() <= 0)
      throw ConfigError(strata::detail::message("ShmCommunicator: timeout ", o.timeout.count(), " ms must be positive"));
  }

  ShmCommunicator(SharedSegment segment, int rank, int size, ShmOptions const& options, bool build)
      : segment_(std::move(segment)), rank_(rank), staging_(staging_bytes(options)) {
    std::byte* base = segment_.data();
    auto* header = reinterpret_cast<Header*>(base);
    auto* state = reinterpret_cast<Rendezvous::State*>(base + state_offset());
    auto* slots = reinterpret_cast<Rendezvous::Slot*>(base + slots_offset());
    if (build) {
      new (header) Header{};
      header->size = size;
      header->staging_bytes = staging_;
      new (state) Rendezvous::State{};
      for (int r = 0; r < size; ++r) new (slots + r) Rendezvous::Slot{};
      header->ready.store(magic, std::memory_order_release);
    } else {
      auto const deadline = std::chrono::steady_clock::now() + options.timeout;
      while (header->ready.load(std::memory_order_acquire) != magic) {
        if (std::chrono::steady_clock::now() >= deadline)
          throw CommError("ShmCommunicator: the shared-memory segment was never initialised by rank 0");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (header->size != size || header->staging_bytes != staging_)
        throw CommError(strata::detail::message("ShmCommunicator: rank ", rank, " expects ", size, " ranks of ",
                                                staging_, " staging bytes but the segment was made for ", header->size,
                                                " ranks of ", header->staging_bytes,
                                                "; every rank must give the same size and options"));
    }
    world_ = std::make_unique<Rendezvous>(*state, slots, size, options.timeout, detail::Sharing::processes);
    std::byte* staging = base + staging_offset(size);
    auto fill = [&](auto& views) {
      using T = std::remove_pointer_t<typename std::remove_reference_t<decltype(views)>::value_type>;
      for (int r = 0; r < size; ++r) views.push_back(reinterpret_cast<T*>(staging + std::size_t(r) * staging_));
    };
    std::apply([&](auto&... views) { (fill(views), ...); }, views_);
  }

  template <class T>
  T* staging(int r) const {
    return std::get<std::vector<T*>>(views_)[std::size_t(r)];
  }
  // The inputs and outputs of the slice this rank reduces: its own `in` and `out` there,
  // and every other rank's staging area from `offset`.
  template <class T>
  std::pair<T const* const*, T* const*> pointers(std::size_t offset, T const* in, T* out) {
    auto& ins = std::get<std::vector<T const*>>(ins_);
    auto& outs = std::get<std::vector<T*>>(outs_);
    ins.resize(std::size_t(size()));
    outs.resize(std::size_t(size()));
    for (int r = 0; r < size(); ++r) {
      ins[std::size_t(r)] = r == rank_ ? in : staging<T>(r) + offset;
      outs[std::size_t(r)] = r == rank_ ? out : staging<T>(r) + offset;
    }
    return {ins.data(), outs.data()};
  }

  template <class T>
  static void copy(T const* from, std::size_t n, T* to) {
    if (n && from != to) std::memcpy(to, from, n * sizeof(T));
  }

  // Pieces [at, at + m) of [0, n), at least one (an empty call still meets, so that every
  // rank checks every call).
  template <class F>
  static void in_pieces(std::size_t n, std::size_t piece, F&& f) {
    std::size_t at = 0;
    do {
      std::size_t const m = std::min(piece, n - at);
      f(at, m);
      at += m;
    } while (at < n);
  }
  // Pieces of every rank's owned slice at once: offsets 0, q, 2q, ... into each slice.
  template <class F>
  void slice_pieces(std::size_t n, std::size_t q, F&& f) const {
    std::size_t const longest = owned_slice(n, size(), 0).size();  // the first slice is never shorter
    std::size_t offset = 0;
    do {
      f(offset, q);
      offset += q;
    } while (offset < longest);
  }
  // Rank r's part of the piece at `offset` (at most q long) of its owned slice of [0, n).
  Slice piece_of(std::size_t n, int r, std::size_t offset, std::size_t q) const {
    Slice const s = owned_slice(n, size(), r);
    std::size_t const begin = std::min(s.end, s.begin + offset);
    return {begin, std::min(s.end, begin + q)};
  }

  // A malformed call is still published, so that every rank's check names it; it only
  // moves nothing.
  [[nodiscard]] bool well_formed(CallDescriptor const& call) const { return malformed(call, size()).empty(); }

  template <class Body>
  void meet(CallDescriptor const& call, Body&& body) {
    world_->collective(rank_, {call, nullptr, nullptr}, "ShmCommunicator", std::forward<Body>(body));
  }

  SharedSegment segment_;
  int rank_ = 0;
  std::size_t staging_ = 0;
  std::unique_ptr<Rendezvous> world_;
  std::tuple<std::vector<float*>, std::vector<bf16*>, std::vector<fp16*>, std::vector<std::byte*>> views_;
  // pointers()'s arrays, reused
  std::tuple<std::vector<float const*>, std::vector<bf16 const*>, std::vector<fp16 const*>> ins_;
  std::tuple<std::vector<float*>, std::vector<bf16*>, std::vector<fp16*>> outs_;
};

static_assert(Communicator<ShmCommunicator>);

}  // namespace strata::comm
