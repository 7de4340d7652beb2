#pragma once
// A fit callback that keeps the model's host weights at the end of every epoch (fit brings
// them to the host before validation and the epoch's callbacks).

#include <vector>

#include "strata.hpp"

template <class Model>
struct WeightsAfterEachEpoch {
  Model const* model;
  std::vector<std::vector<float>>* weights;
  void on_epoch_end(strata::EpochLogs const&) {
    weights->emplace_back(model->parameters().begin(), model->parameters().end());
  }
};
