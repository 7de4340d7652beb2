#pragma once
// Core: errors, tensors, 16-bit types, randomness, device backends.

#include "strata/core/aligned_buffer.hpp"
#include "strata/core/backend.hpp"
#include "strata/core/blas.hpp"
#include "strata/core/dtype.hpp"
#include "strata/core/error.hpp"
#include "strata/core/random.hpp"
#include "strata/core/tensor.hpp"
