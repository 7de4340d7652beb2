#pragma once
// Monitoring: step timing, collectives' latency and bandwidth, memory, the trace timeline
// (docs/monitoring.md). TensorBoard event files need Protocol Buffers: <strata/tensorboard.hpp>.

#include "strata/profile/cluster_probe.hpp"
#include "strata/profile/loop_profiler.hpp"
#include "strata/profile/memory.hpp"
#include "strata/profile/probe.hpp"
#include "strata/profile/profiler.hpp"
#include "strata/profile/report.hpp"
#include "strata/profile/run_profile.hpp"
#include "strata/profile/trace_writer.hpp"
