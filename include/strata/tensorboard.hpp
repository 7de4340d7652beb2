#pragma once
// TensorBoard event files (docs/monitoring.md): the TensorBoard callback, and the event file
// writer and reader. Needs Protocol Buffers: link the strata::tensorboard CMake target.

#include "strata/profile.hpp"
#include "strata/profile/event_file.hpp"
#include "strata/profile/tensorboard.hpp"

namespace strata {
using profile::TensorBoard;
using profile::TensorBoardOptions;
}  // namespace strata
