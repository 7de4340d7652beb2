#pragma once
// Communication: in-process replica threads and reductions.

#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_group.hpp"
