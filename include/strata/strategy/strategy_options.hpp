#pragma once
// StrategyOptions: what a strategy (and the Trainer that owns one) is made with.
//
//   strata::Trainer<strata::MultiWorkerMirrored<2>> trainer({.timeout = std::chrono::seconds(30)});

#include <chrono>

#include "strata/comm/communicator.hpp"

namespace strata::strategy {

struct StrategyOptions {
  // How long a replica thread, or a process of a multi-worker job, waits in a collective for
  // the others before every one that arrived throws a CommError naming those that did not.
  // Set it above the longest time one replica may spend between two collectives (a step, a
  // validation pass, a checkpoint write): too short turns a slow worker into an error.
  std::chrono::milliseconds timeout = comm::default_timeout;
  // Threads each replica's large CPU operations (its GEMMs) split over, the replica's own
  // included: TensorFlow's and PyTorch's intra-op threads. 0: automatic — the available
  // cores divided by the replicas for OneDevice, Mirrored<N> and CentralStorage<N> on the CPU
  // (so OneDevice uses every core), 1 for a job of several processes. 1: none, each replica
  // computes on its own thread alone. A split product adds its terms in another order than
  // an unsplit one: results are the same run to run for one setting, and within rounding
  // of those of another.
  int intra_op_threads = 0;
};

}  // namespace strata::strategy
