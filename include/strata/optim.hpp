#pragma once
// Optimizers, fused over the flat parameter arena, and learning-rate schedules.

#include "strata/optim/adam.hpp"
#include "strata/optim/element_rule.hpp"
#include "strata/optim/lamb.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/optim/schedule.hpp"
#include "strata/optim/sgd.hpp"
