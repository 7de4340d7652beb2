#pragma once
// ParameterServer<Workers, Servers>: variables partitioned over servers, workers that pull,
// compute and push asynchronously under a staleness bound, and a coordinator that schedules
// steps (docs/parameter_server.md). Needs ZeroMQ: link the strata::ps CMake target.
#include "strata/ps/coordinator.hpp"
#include "strata/ps/local_cluster.hpp"
#include "strata/ps/message.hpp"
#include "strata/ps/partition.hpp"
#include "strata/ps/shard_server.hpp"
#include "strata/ps/worker.hpp"
#include "strata/ps/cluster_spec.hpp"
#include "strata/ps/job.hpp"
#include "strata/ps/trainer.hpp"
