#pragma once
// Models: layers, Sequential, losses, metrics; BERT as types.

#include "strata/nn/activation.hpp"
#include "strata/nn/attention.hpp"
#include "strata/nn/bert.hpp"
#include "strata/nn/chain.hpp"
#include "strata/nn/conv.hpp"
#include "strata/nn/dense.hpp"
#include "strata/nn/dropout.hpp"
#include "strata/nn/embedding.hpp"
#include "strata/nn/init.hpp"
#include "strata/nn/layer.hpp"
#include "strata/nn/layer_norm.hpp"
#include "strata/nn/loss.hpp"
#include "strata/nn/metric.hpp"
#include "strata/nn/residual.hpp"
#include "strata/nn/sequential.hpp"
