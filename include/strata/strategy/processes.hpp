#pragma once
// The processes of a job as a strategy sees them: which one this is, how many there are,
// and the sums that make a figure the job's rather than one process's (evaluation, the
// epoch's metrics). One process (SingleProcess) unless the strategy spans several:
// strata/multi_worker.hpp gives MultiWorkerMirrored its MPI processes
// (strategy/mpi_processes.hpp).

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>

#include "strata/comm/thread_communicator.hpp"
#include "strata/strategy/strategy_options.hpp"

namespace strata::strategy {

struct SingleProcess {
  SingleProcess() = default;
  explicit SingleProcess(StrategyOptions const&) {}
  [[nodiscard]] static constexpr int process() { return 0; }
  [[nodiscard]] static constexpr int processes() { return 1; }
  [[nodiscard]] static constexpr bool is_chief() { return true; }
  // x = the sum of every process's x, element by element: here, x.
  static void sum(std::span<double>) {}
  static void sum(std::span<float>) {}
  // x = the largest of every process's x, element by element.
  static void max(std::span<double>) {}
  // x = the smallest of every process's x, element by element.
  static void min(std::span<int>) {}
  static void min(std::span<double>) {}
  // `text` = the text of process `root`.
  static void broadcast(std::string&, int) {}
  // `all` = every process's `mine`, in process order (all as long as processes() × mine).
  static void all_gather(std::span<std::byte const> mine, std::span<std::byte> all) {
    std::copy(mine.begin(), mine.end(), all.begin());
  }
};

template <class Strategy>
struct processes_for {
  using type = SingleProcess;
};

// The communicator Strategy::run gives each replica: the replica threads of this process
// (strategy/mpi_processes.hpp gives MultiWorkerMirrored one over every process's replicas).
template <class Strategy>
struct replica_communicator_for {
  using type = comm::ThreadCommunicator;
  static type make(comm::ThreadCommunicator local, StrategyOptions const&) { return local; }
};

}  // namespace strata::strategy
