#pragma once
// MpiProcesses: the processes of MPI_COMM_WORLD, for a strategy that spans them
// (strategy/processes.hpp). Process 0 is the chief. Its collectives run on a communicator of
// its own, duplicated from MPI_COMM_WORLD when the strategy is made (collective: every
// process makes its strategies in the same order), and are called from one thread. They
// wait StrategyOptions::timeout for the other processes, then throw a CommError naming the
// ones that did not arrive.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "strata/comm/mpi_communicator.hpp"
#include "strata/comm/reduce_op.hpp"
#include "strata/comm/worker_communicator.hpp"
#include "strata/core/error.hpp"
#include "strata/policy/strategy.hpp"
#include "strata/strategy/processes.hpp"
#include "strata/strategy/strategy_options.hpp"

namespace strata::strategy {

class MpiProcesses {
 public:
  explicit MpiProcesses(StrategyOptions const& options = {}) : comm_(MPI_COMM_WORLD, {.timeout = options.timeout}) {}

  [[nodiscard]] int process() const { return comm_.rank(); }
  [[nodiscard]] int processes() const { return comm_.size(); }
  [[nodiscard]] bool is_chief() const { return comm_.rank() == 0; }

  void sum(std::span<double> x) { combine(x, [](double a, double b) { return a + b; }); }
  void sum(std::span<float> x) { comm_.all_reduce(x, comm::ReduceOp::sum); }
  void max(std::span<double> x) { combine(x, [](double a, double b) { return std::max(a, b); }); }
  void min(std::span<int> x) { combine(x, [](int a, int b) { return std::min(a, b); }); }
  void min(std::span<double> x) { combine(x, [](double a, double b) { return std::min(a, b); }); }
  void all_gather(std::span<std::byte const> mine, std::span<std::byte> all) { comm_.all_gather(mine, all); }
  void broadcast(std::string& text, int root) {
    std::uint64_t length = text.size();
    comm_.broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&length, 1)), root);
    text.resize(std::size_t(length));
    comm_.broadcast(std::as_writable_bytes(std::span<char>(text)), root);
  }

 private:
  // Every process's x gathered, then combined in process order: the same bits on every
  // process. Every call goes through the communicator, so a process that stalls is named in
  // a CommError after the timeout, here as in the gradient all-reduce.
  template <class T, class Op>
  void combine(std::span<T> x, Op op) {
    std::size_t const n = x.size();
    gathered_.resize(n * sizeof(T) * std::size_t(processes()));
    comm_.all_gather(std::as_bytes(std::span<T const>(x)), std::span<std::byte>(gathered_));
    for (std::size_t i = 0; i < n; ++i) {
      T value;
      std::memcpy(&value, gathered_.data() + i * sizeof(T), sizeof(T));
      for (int p = 1; p < processes(); ++p) {
        T other;
        std::memcpy(&other, gathered_.data() + (std::size_t(p) * n + i) * sizeof(T), sizeof(T));
        value = op(value, other);
      }
      x[i] = value;
    }
  }

  comm::MpiCommunicator comm_;
  std::vector<std::byte> gathered_;
};

template <int LocalN>
struct processes_for<policy::MultiWorkerMirrored<LocalN>> {
  using type = MpiProcesses;
};

// Each replica of Strategy::run joins the replicas of every process. Made in the same order
// on every process (replica 0's first), from one thread: MPI_Comm_dup is collective.
template <int LocalN>
struct replica_communicator_for<policy::MultiWorkerMirrored<LocalN>> {
  using type = comm::WorkerCommunicator;
  static type make(comm::ThreadCommunicator local, StrategyOptions const& options) {
    return type(std::move(local), MPI_COMM_WORLD, {.timeout = options.timeout});
  }
};

}  // namespace strata::strategy
