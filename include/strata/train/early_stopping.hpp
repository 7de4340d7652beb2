#pragma once
// EarlyStopping: stops training when a monitored metric has not improved for `patience` epochs.
//   strata::EarlyStopping{.monitor = "val_loss", .patience = 2}

#include <limits>
#include <string>

#include "strata/core/error.hpp"
#include "strata/io/training_state.hpp"
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

  // A resumed run (BackupAndRestore listed before this callback) replays the restored
  // history, so it stops after the same epoch as an uninterrupted run would.
  void on_train_begin(TrainBegin const&, io::TrainingState const& state = {}) {
    if (patience < 0) throw ConfigError(strata::detail::message("EarlyStopping: patience ", patience, " must be >= 0"));
    best = std::numeric_limits<double>::quiet_NaN();
    stopped_epoch = -1;
    wait = 0;
    if (auto const it = state.progress.history.find(monitor); it != state.progress.history.end())
      for (double value : it->second) (void)observe(value);
  }

  bool on_epoch_end(EpochLogs const& logs) {
    if (observe(monitored_value(logs, monitor, "EarlyStopping"))) {
      stopped_epoch = logs.epoch;
      return true;
    }
    return false;
  }

 private:
  // Takes one epoch's value; true when patience has run out.
  bool observe(double value) {
    bool const improved = improves(value, best, monitor, mode, min_delta);
    if (improved) {
      best = value;
      wait = 0;
      return false;
    }
    return ++wait > patience;
  }
};

}  // namespace strata::train
