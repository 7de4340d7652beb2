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
};

}  // namespace strata::strategy
