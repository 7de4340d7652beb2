#pragma once
// Data: datasets, readers, batching, prefetching. (The BERT tokenizer, which needs
// utf8proc, is <strata/text.hpp>.)

#include "strata/data/batch.hpp"
#include "strata/data/csv.hpp"
#include "strata/data/dataset.hpp"
#include "strata/data/fashion_mnist.hpp"
#include "strata/data/idx.hpp"
#include "strata/data/text_dataset.hpp"
