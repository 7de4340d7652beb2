#pragma once
// A monitored epoch metric ("val_loss", "accuracy") and when it has improved: shared by
// EarlyStopping and ModelCheckpoint's save_best_only.

#include <cmath>
#include <string>

#include "strata/core/error.hpp"
#include "strata/train/logs.hpp"

namespace strata::train {

enum class MonitorMode { automatic, min, max };  // automatic: max for accuracies, min otherwise

// The value of `monitor` in `logs`; throws ConfigError naming the metrics the run has.
inline double monitored_value(EpochLogs const& logs, std::string const& monitor, char const* who) {
  if (auto const value = logs.get(monitor)) return *value;
  std::string present;
  for (auto const& n : logs.names()) present.append(present.empty() ? "" : ", ").append(n);
  throw ConfigError(strata::detail::message(who, ": monitor '", monitor, "' is not a metric of this run (it has ", present,
                                            "); val_* metrics need FitOptions::validation"));
}

// Whether `value` improves on `best` (NaN: nothing seen yet) by more than `min_delta`.
inline bool improves(double value, double best, std::string const& monitor, MonitorMode mode, double min_delta = 0.0) {
  bool const maximise = mode == MonitorMode::max || (mode == MonitorMode::automatic && monitor.find("acc") != std::string::npos);
  return std::isnan(best) || (maximise ? value > best + min_delta : value < best - min_delta);
}

}  // namespace strata::train
