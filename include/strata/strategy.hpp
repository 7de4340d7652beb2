#pragma once
// Strategies and the custom-loop API (run, reduce, gather, distribute).

#include "strata/strategy/backend_for.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/replica_context.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/strategy/strategy_options.hpp"
#include "strata/strategy/worker_input.hpp"
