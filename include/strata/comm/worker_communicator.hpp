#pragma once
// WorkerCommunicator: one replica of a multi-worker job, as one Communicator over every
// replica of every process: Hierarchical<ThreadCommunicator, ProcessCommunicator> with the
// two communicators it joins owned here (the process one on the heap, so that moving this
// object leaves Hierarchical's view of it valid). Rank = process * local replicas + local
// rank.
//
// Each replica's process communicator joins the replicas with its local rank in every
// process (in shared memory on one machine, over MPI across machines); making one is
// collective over `parent`, so every process must make them in the same order, from one
// thread: CommunicatorSync makes replica 0's, then 1's, ...

#include <memory>
#include <utility>

#include <mpi.h>

#include "strata/comm/hierarchical.hpp"
#include "strata/comm/process_communicator.hpp"
#include "strata/comm/thread_communicator.hpp"

namespace strata::comm {

class WorkerCommunicator {
 public:
  WorkerCommunicator(ThreadCommunicator local, MPI_Comm parent = MPI_COMM_WORLD, ProcessOptions options = {})
      : local_(std::move(local)), global_(std::make_unique<ProcessCommunicator>(parent, options)) {}

  [[nodiscard]] int rank() const { return global_->rank() * local_.size() + local_.rank(); }
  [[nodiscard]] int size() const { return global_->size() * local_.size(); }
  // This process among the job's processes, and how many there are.
  [[nodiscard]] int process() const { return global_->rank(); }
  [[nodiscard]] int processes() const { return global_->size(); }
  // The replicas with this local rank in every process (one per process): what crosses
  // processes only, such as the chief's broadcast of the initial weights.
  [[nodiscard]] ProcessCommunicator& across_processes() { return *global_; }
  [[nodiscard]] Transport transport() const { return global_->transport(); }

  template <class... Args>
  void all_reduce(Args&&... args) {
    joined().all_reduce(std::forward<Args>(args)...);
  }
  template <class... Args>
  void reduce_scatter(Args&&... args) {
    joined().reduce_scatter(std::forward<Args>(args)...);
  }
  template <class... Args>
  void all_gather(Args&&... args) {
    joined().all_gather(std::forward<Args>(args)...);
  }
  template <class... Args>
  void broadcast(Args&&... args) {
    joined().broadcast(std::forward<Args>(args)...);
  }
  void barrier() { joined().barrier(); }

 private:
  Hierarchical<ThreadCommunicator, ProcessCommunicator> joined() { return {local_, *global_}; }

  ThreadCommunicator local_;
  std::unique_ptr<ProcessCommunicator> global_;
};

static_assert(Communicator<WorkerCommunicator>);

}  // namespace strata::comm
