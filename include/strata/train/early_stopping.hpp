#pragma once
// EarlyStopping: stops training when a monitored metric has not improved for `patience` epochs.
//   strata::EarlyStopping{.monitor = "val_loss", .patience = 2}
//   strata::EarlyStopping{.monitor = "val_loss", .patience = 2, .restore_best_weights = true}
// With restore_best_weights the model ends fit with the weights of its best epoch, as Keras 3
// does: whether training stopped early or ran all its epochs. It keeps one copy of the weights,
// which a BackupAndRestore backup carries (io::TrainingState::kept), so a resumed run ends
// with the same weights as an uninterrupted one.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

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
  // At the end of fit, the model takes the weights it had at the end of its best epoch.
  bool restore_best_weights = false;

  // Read after training: the best value seen, the 0-based epoch it was seen in, the epoch
  // training stopped after (-1: it did not stop) and the epoch whose weights the model was
  // given back (-1: none; see on_train_begin for a resumed run).
  double best = std::numeric_limits<double>::quiet_NaN();
  int best_epoch = -1;
  int stopped_epoch = -1;
  int restored_epoch = -1;
  int wait = 0;              // epochs measured without improvement (after validated ones only, for val_*)
  int validation_freq = 0;   // the run's (TrainBegin), set by on_train_begin
  // With restore_best_weights: the weights at the end of best_epoch, every tensor in turn (as
  // Keras' best_weights); empty when they are not known (see on_train_begin).
  std::vector<float> best_weights{};

  // A resumed run (BackupAndRestore listed before this callback) replays the restored
  // history, so it stops after the same epoch as an uninterrupted run would, and takes the
  // best weights from the backup. (A backup taken at the end of the best epoch itself was
  // written before this callback kept them: the restored weights are that epoch's.)
  void on_train_begin(TrainBegin const& info) {
    io::TrainingState none;
    on_train_begin(info, none);
  }
  void on_train_begin(TrainBegin const& info, io::TrainingState& state) {
    if (patience < 0) throw ConfigError(strata::detail::message("EarlyStopping: patience ", patience, " must be >= 0"));
    best = std::numeric_limits<double>::quiet_NaN();
    best_epoch = stopped_epoch = restored_epoch = -1;
    wait = 0;
    best_weights.clear();
    validation_freq = info.validation_freq;
    if (auto const it = state.progress.history.find(monitor); it != state.progress.history.end())
      for (std::size_t i = 0; i < it->second.size(); ++i)
        observe(it->second[i], monitored_epoch(i, monitor, validation_freq));
    if (!restore_best_weights || best_epoch < 0) return;
    int const epochs = int(state.progress.epoch);  // completed, when restored at an epoch's end (batch 0)
    auto const saved = state.restored_kept.find(kept_name());
    if (saved != state.restored_kept.end() && saved->second.size() == floats_of(state)) {
      best_weights = std::move(saved->second);
      state.restored_kept.erase(saved);
      publish(state);
    } else if (best_epoch == epochs - 1 && state.progress.batch == 0) {  // restored at the best epoch's end
      keep(state);
    }
  }

  bool on_epoch_end(EpochLogs const& logs) {
    io::TrainingState none;
    return on_epoch_end(logs, none);
  }
  bool on_epoch_end(EpochLogs const& logs, io::TrainingState& state) {
    auto const value = monitored_value(logs, monitor, validation_freq, "EarlyStopping");
    if (!value) return false;  // not measured after this epoch: patience counts the epochs that are
    Observed const seen = observe(*value, logs.epoch);
    if (seen.improved && restore_best_weights) keep(state);
    if (seen.out_of_patience) stopped_epoch = logs.epoch;
    return seen.out_of_patience;
  }

  // Gives the model the weights of the best epoch, where they were kept.
  void on_train_end(History const&, io::TrainingState& state) {
    if (!restore_best_weights || best_weights.empty()) return;
    std::size_t const floats = floats_of(state);
    if (floats != best_weights.size())
      throw ConfigError(strata::detail::message("EarlyStopping: kept ", best_weights.size(), " weights of epoch ",
                                                best_epoch, ", but this model has ", floats,
                                                "; use one EarlyStopping per run"));
    std::size_t at = 0;
    for (io::StateTensor const& t : state.weights) {
      std::copy_n(best_weights.begin() + std::ptrdiff_t(at), t.values.size(), t.values.begin());
      at += t.values.size();
    }
    restored_epoch = best_epoch;
  }

 private:
  struct Observed {
    bool improved = false, out_of_patience = false;
  };
  // Takes epoch `epoch`'s value.
  Observed observe(double value, int epoch) {
    if (improves(value, best, monitor, mode, min_delta)) {
      best = value;
      best_epoch = epoch;
      wait = 0;
      return {.improved = true};
    }
    return {.out_of_patience = ++wait > patience};
  }

  // The weights in hand, those of best_epoch.
  void keep(io::TrainingState& state) {
    best_weights.clear();
    for (io::StateTensor const& t : state.weights)
      best_weights.insert(best_weights.end(), t.values.begin(), t.values.end());
    publish(state);
  }
  // Shows the kept weights to the state, for a backup to save: one tensor named by the epoch.
  void publish(io::TrainingState& state) {
    std::string const folder = kept_folder();
    std::erase_if(state.kept, [&](io::StateTensor const& t) { return t.name.starts_with(folder); });
    if (!state.weights.empty())
      state.kept.push_back({kept_name(), {std::int64_t(best_weights.size())}, std::span<float>(best_weights)});
  }
  [[nodiscard]] std::string kept_folder() const {
    return std::string(io::kept_prefix) + "early_stopping/" + monitor + "/";
  }
  [[nodiscard]] std::string kept_name() const { return kept_folder() + "epoch_" + std::to_string(best_epoch); }
  static std::size_t floats_of(io::TrainingState const& state) {
    std::size_t floats = 0;
    for (io::StateTensor const& t : state.weights) floats += t.values.size();
    return floats;
  }
};

}  // namespace strata::train
