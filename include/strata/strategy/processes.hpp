#pragma once
// The processes of a job as a strategy sees them: which one this is, how many there are,
// and the sums that make a figure the job's rather than one process's (evaluation, the
// epoch's metrics). One process (SingleProcess) unless the strategy spans several:
// strata/multi_worker.hpp gives MultiWorkerMirrored its MPI processes
// (strategy/mpi_processes.hpp).

#include <span>
#include <string>

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
  // `text` = the text of process `root`.
  static void broadcast(std::string&, int) {}
};

template <class Strategy>
struct processes_for {
  using type = SingleProcess;
};

}  // namespace strata::strategy
