#pragma once
// EarlyStopping: stops training when a monitored metric has not improved for `patience` epochs.
//   strata::EarlyStopping{.monitor = "val_loss", .patience = 2}

#include <limits>
#include <string>

#include "strata/core/error.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/monitor.hpp"

namespace strata::train {

struct EarlyStopping {
  using Mode = MonitorMode;  // automatic: max for accuracies, min otherwise

  std::string monitor = "val_loss";
  int patience = 0;        // epochs without improvement tolerated before stopping
  double min_delta = 0.0;  // smaller changes do not count as improvement
  Mode mode = Mode::automatic;

  // Read after training: the best value seen and the 0-based epoch training stopped after (-1: it did not stop).
  double best = std::numeric_limits<double>::quiet_NaN();
  int stopped_epoch = -1;
  int wait = 0;

  void on_train_begin(TrainBegin const&) {
    if (patience < 0) throw ConfigError(strata::detail::message("EarlyStopping: patience ", patience, " must be >= 0"));
    best = std::numeric_limits<double>::quiet_NaN();
    stopped_epoch = -1;
    wait = 0;
  }

  bool on_epoch_end(EpochLogs const& logs) {
    double const value = monitored_value(logs, monitor, "EarlyStopping");
    bool const improved = improves(value, best, monitor, mode, min_delta);
    if (improved) {
      best = value;
      wait = 0;
      return false;
    }
    if (++wait > patience) {
      stopped_epoch = logs.epoch;
      return true;
    }
    return false;
  }
};

}  // namespace strata::train
