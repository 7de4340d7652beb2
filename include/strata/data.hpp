#pragma once
// Data: datasets, readers, batching, prefetching.

#include "strata/data/batch.hpp"
#include "strata/data/csv.hpp"
#include "strata/data/dataset.hpp"
#include "strata/data/fashion_mnist.hpp"
#include "strata/data/idx.hpp"
