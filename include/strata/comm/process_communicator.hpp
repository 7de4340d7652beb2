#pragma once
// ProcessCommunicator: this process among the processes of an MPI communicator, as one
// Communicator, over the fastest path between them. The processes of one machine meet in
// shared memory (ShmCommunicator); when the job spans machines,
// Hierarchical<ShmCommunicator, MpiCommunicator> reduces inside each machine first and
// crosses machines over MPI, between the processes with the same place on their machines
// (each with 1/k of the data, all k at once). Rank and size are the MPI communicator's.
//
// Shared memory is used when every machine runs as many processes, with consecutive ranks
// (what mpirun and srun give by default). Otherwise, with ProcessOptions::shared_memory
// false, or with STRATA_SHM_DISABLE=1 in any process's environment, every call goes over
// MPI. transport() says which.
//
// Making one is collective over `parent`: every process makes its communicators in the
// same order, from one thread.

#include <mpi.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "strata/comm/communicator.hpp"
#include "strata/comm/hierarchical.hpp"
#include "strata/comm/mpi_communicator.hpp"
#include "strata/comm/shm_communicator.hpp"

namespace strata::comm {

struct ProcessOptions {
  std::chrono::milliseconds timeout = default_timeout;
  bool shared_memory = true;                                // between the processes of a machine
  std::size_t staging_bytes = ShmOptions{}.staging_bytes;  // per process, in shared memory
};

enum class Transport { mpi, shared_memory, shared_memory_and_mpi };

inline char const* name(Transport t) {
  constexpr char const* names[] = {"MPI", "shared memory", "shared memory within machines, MPI across them"};
  return names[int(t)];
}

class ProcessCommunicator {
 public:
  explicit ProcessCommunicator(MPI_Comm parent = MPI_COMM_WORLD, ProcessOptions options = {})
      : ProcessCommunicator(parent, Machine(parent).comm, options) {}
  // `machine`: the processes of `parent` that share memory with this one (a subset of a
  // machine is fine: tests split one machine in two to take the path across machines).
  ProcessCommunicator(MPI_Comm parent, MPI_Comm machine, ProcessOptions options) {
    MPI_Comm_rank(parent, &rank_);
    MPI_Comm_size(parent, &size_);
    int machine_rank = 0, machine_size = 1;
    MPI_Comm_rank(machine, &machine_rank);
    MPI_Comm_size(machine, &machine_size);
    if (!regular(parent, machine, machine_rank, machine_size) || !wanted(parent, options) || machine_size == 1) {
      mpi_ = std::make_unique<MpiCommunicator>(parent, MpiOptions{.timeout = options.timeout});
      return;
    }
    shm_ = std::make_unique<ShmCommunicator>(
        shared(parent, machine, machine_rank, machine_size, {.timeout = options.timeout, .staging_bytes = options.staging_bytes}));
    if (machine_size < size_) {  // several machines: the processes with this place on each
      MPI_Comm across = MPI_COMM_NULL;
      MPI_Comm_split(parent, machine_rank, rank_, &across);
      mpi_ = std::make_unique<MpiCommunicator>(across, MpiOptions{.timeout = options.timeout});
      MPI_Comm_free(&across);  // the MpiCommunicator holds its own duplicates
    }
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] Transport transport() const {
    return !shm_ ? Transport::mpi : mpi_ ? Transport::shared_memory_and_mpi : Transport::shared_memory;
  }
  void set_timeout(std::chrono::milliseconds timeout) {
    if (shm_) shm_->set_timeout(timeout);
    if (mpi_) mpi_->set_timeout(timeout);
  }

  template <class... Args>
  void all_reduce(Args&&... args) {
    on_path([&](auto& c) { c.all_reduce(std::forward<Args>(args)...); });
  }
  template <class... Args>
  void reduce_scatter(Args&&... args) {
    on_path([&](auto& c) { c.reduce_scatter(std::forward<Args>(args)...); });
  }
  template <class... Args>
  void all_gather(Args&&... args) {
    on_path([&](auto& c) { c.all_gather(std::forward<Args>(args)...); });
  }
  template <class... Args>
  void broadcast(Args&&... args) {
    on_path([&](auto& c) { c.broadcast(std::forward<Args>(args)...); });
  }
  void barrier() {
    on_path([](auto& c) { c.barrier(); });
  }

 private:
  // The processes that share memory with this one, freed with the object.
  struct Machine {
    explicit Machine(MPI_Comm parent) {
      int rank = 0;
      MPI_Comm_rank(parent, &rank);
      MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &comm);
    }
    Machine(Machine const&) = delete;
    Machine& operator=(Machine const&) = delete;
    ~Machine() { MPI_Comm_free(&comm); }
    MPI_Comm comm = MPI_COMM_NULL;
  };

  template <class F>
  void on_path(F&& f) {
    if (shm_ && mpi_) {
      Hierarchical<ShmCommunicator, MpiCommunicator> both(*shm_, *mpi_);
      f(both);
    } else if (shm_) {
      f(*shm_);
    } else {
      f(*mpi_);
    }
  }

  // Whether every machine has as many processes with consecutive ranks, so that a rank is
  // machine * machine_size + machine_rank (Hierarchical's numbering). The same verdict on
  // every process: all read the same table.
  bool regular(MPI_Comm parent, MPI_Comm machine, int machine_rank, int machine_size) const {
    int first = rank_;  // the parent rank of this machine's first process
    MPI_Bcast(&first, 1, MPI_INT, 0, machine);
    std::array<int, 3> const mine{machine_rank, machine_size, first};
    std::vector<std::array<int, 3>> all(static_cast<std::size_t>(size_));
    MPI_Allgather(mine.data(), 3, MPI_INT, all.data(), 3, MPI_INT, parent);
    int const k = all[0][1];
    bool ok = size_ % k == 0;
    for (int r = 0; r < size_; ++r) {
      auto const& p = all[std::size_t(r)];
      ok = ok && p[1] == k && p[0] == r % k && p[2] == r - r % k;
    }
    return ok;
  }

  // Shared memory unless any process turned it off.
  static bool wanted(MPI_Comm parent, ProcessOptions const& options) {
    char const* off = std::getenv("STRATA_SHM_DISABLE");
    int want = options.shared_memory && !(off && *off && std::strcmp(off, "0") != 0);
    MPI_Allreduce(MPI_IN_PLACE, &want, 1, MPI_INT, MPI_MIN, parent);
    return want != 0;
  }

  // The machine's first process makes the segment under a new name and tells the others,
  // who open it; once every process of the job has (or one failed, then all throw the same
  // kind of error), the name is removed.
  ShmCommunicator shared(MPI_Comm parent, MPI_Comm machine, int machine_rank, int machine_size,
                         ShmOptions const& options) const {
    static int made = 0;  // one process makes its communicators from one thread
    std::array<char, 64> segment{};
    std::array<char, 1024> problem{};
    std::unique_ptr<ShmCommunicator> shm;
    auto attempt = [&](auto make) {
      try {
        shm = std::make_unique<ShmCommunicator>(make());
      } catch (std::exception const& e) {
        std::snprintf(problem.data(), problem.size(), "%s", e.what());
      }
    };
    if (machine_rank == 0) {
      auto const now = std::chrono::steady_clock::now().time_since_epoch().count();
      std::snprintf(segment.data(), segment.size(), "/strata-%d-%d-%llx", int(::getpid()), made++,
                    static_cast<unsigned long long>(now));
      attempt([&] { return ShmCommunicator::create(segment.data(), machine_size, options); });
    }
    MPI_Bcast(segment.data(), int(segment.size()), MPI_CHAR, 0, machine);
    int created = shm != nullptr || machine_rank != 0;
    MPI_Bcast(&created, 1, MPI_INT, 0, machine);
    if (machine_rank != 0 && created)
      attempt([&] { return ShmCommunicator::open(segment.data(), machine_rank, machine_size, options); });
    int failed = problem[0] != 0 || !created;
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, parent);
    if (failed)
      throw CommError(problem[0] ? std::string(problem.data())
                                 : "ProcessCommunicator: another process could not set up shared memory (its error "
                                   "says why); STRATA_SHM_DISABLE=1 uses MPI instead");
    if (machine_rank == 0) shm->unlink();
    return std::move(*shm);
  }

  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<ShmCommunicator> shm_;  // the processes of this machine
  std::unique_ptr<MpiCommunicator> mpi_;  // every process, or with shm_ those across machines
};

static_assert(Communicator<ProcessCommunicator>);

}  // namespace strata::comm
