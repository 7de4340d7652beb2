#pragma once
// MpiProcesses: the processes of MPI_COMM_WORLD, for a strategy that spans them
// (strategy/processes.hpp). Process 0 is the chief. Its collectives run on a communicator of
// its own, duplicated from MPI_COMM_WORLD when the strategy is made (collective: every
// process makes its strategies in the same order), and are called from one thread.

#include <mpi.h>

#include <span>
#include <string>

#include "strata/comm/mpi_communicator.hpp"
#include "strata/comm/reduce_op.hpp"
#include "strata/core/error.hpp"
#include "strata/policy/strategy.hpp"
#include "strata/strategy/processes.hpp"

namespace strata::strategy {

class MpiProcesses {
 public:
  MpiProcesses() : comm_(MPI_COMM_WORLD) {}

  [[nodiscard]] int process() const { return comm_.rank(); }
  [[nodiscard]] int processes() const { return comm_.size(); }
  [[nodiscard]] bool is_chief() const { return comm_.rank() == 0; }

  void sum(std::span<double> x) {
    check(MPI_Allreduce(MPI_IN_PLACE, x.data(), int(x.size()), MPI_DOUBLE, MPI_SUM, comm_.native()), "MPI_Allreduce");
  }
  void sum(std::span<float> x) { comm_.all_reduce(x, comm::ReduceOp::sum); }
  void min(std::span<int> x) {
    check(MPI_Allreduce(MPI_IN_PLACE, x.data(), int(x.size()), MPI_INT, MPI_MIN, comm_.native()), "MPI_Allreduce");
  }
  void broadcast(std::string& text, int root) {
    int length = int(text.size());
    check(MPI_Bcast(&length, 1, MPI_INT, root, comm_.native()), "MPI_Bcast");
    text.resize(std::size_t(length));
    check(MPI_Bcast(text.data(), length, MPI_CHAR, root, comm_.native()), "MPI_Bcast");
  }

 private:
  static void check(int rc, char const* call) {
    if (rc != MPI_SUCCESS) throw CommError(std::string("MpiProcesses: ") + call + " failed: " + comm::detail::mpi_error_string(rc));
  }

  comm::MpiCommunicator comm_;
};

template <int LocalN>
struct processes_for<policy::MultiWorkerMirrored<LocalN>> {
  using type = MpiProcesses;
};

}  // namespace strata::strategy
