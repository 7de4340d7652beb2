#pragma once
// A monitored epoch metric ("val_loss", "accuracy") and when it has improved: shared by
// EarlyStopping and ModelCheckpoint's save_best_only.

#include <cmath>
#include <cstddef>
#include <optional>
#include <string>

#include "strata/core/error.hpp"
#include "strata/train/logs.hpp"

namespace strata::train {

enum class MonitorMode { automatic, min, max };  // automatic: max for accuracies, min otherwise

// Whether `monitor` is measured only after the epochs the run validates after.
inline bool is_validation_metric(std::string const& monitor) { return monitor.starts_with("val_"); }

// The value of `monitor` in `logs`; nullopt for a val_* metric after an epoch the run does not
// validate after (FitOptions::validation_freq), which Keras' callbacks skip too; throws
// ConfigError naming the metrics the run has when it never measures `monitor`.
inline std::optional<double> monitored_value(EpochLogs const& logs, std::string const& monitor, int validation_freq,
                                             char const* who) {
  if (auto const value = logs.get(monitor)) return *value;
  if (is_validation_metric(monitor) && validation_freq > 0 && !validates_after(logs.epoch, validation_freq))
    return std::nullopt;
  std::string present;
  for (auto const& n : logs.names()) present.append(present.empty() ? "" : ", ").append(n);
  throw ConfigError(strata::detail::message(who, ": monitor '", monitor, "' is not a metric of this run (it has ", present,
                                            "); val_* metrics need FitOptions::validation"));
}

// The epoch whose end measured the `i`-th value of `monitor` in a History.
inline int monitored_epoch(std::size_t i, std::string const& monitor, int validation_freq) {
  return is_validation_metric(monitor) && validation_freq > 1 ? int(i + 1) * validation_freq - 1 : int(i);
}

// Whether `value` improves on `best` (NaN: nothing seen yet) by more than `min_delta`.
inline bool improves(double value, double best, std::string const& monitor, MonitorMode mode, double min_delta = 0.0) {
  bool const maximise = mode == MonitorMode::max || (mode == MonitorMode::automatic && monitor.find("acc") != std::string::npos);
  return std::isnan(best) || (maximise ? value > best + min_delta : value < best - min_delta);
}

}  // namespace strata::train
