#pragma once
// Every policy tag and the pack parser.

#include "strata/policy/accumulation.hpp"
#include "strata/policy/communication.hpp"
#include "strata/policy/config.hpp"
#include "strata/policy/device.hpp"
#include "strata/policy/precision.hpp"
#include "strata/policy/slot.hpp"
#include "strata/policy/strategy.hpp"
