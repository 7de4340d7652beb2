#pragma once
// io/: checkpoints in the safetensors format, crash-safe writes, and the checkpoint manager.

#include "strata/io/atomic_file.hpp"
#include "strata/io/checkpoint.hpp"
#include "strata/io/checkpoint_manager.hpp"
#include "strata/io/safetensors.hpp"
#include "strata/io/training_state.hpp"
