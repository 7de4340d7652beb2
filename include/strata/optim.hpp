#pragma once
// Optimizers, fused over the flat parameter arena.

#include "strata/optim/adam.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/optim/sgd.hpp"
