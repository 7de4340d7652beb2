#pragma once
// ModelCheckpoint: saves the run to a CheckpointManager directory at the end of every
// epoch, or every N optimizer steps; with save_best_only, only when the monitored metric
// improved (Keras' ModelCheckpoint).
//
//   strata::ModelCheckpoint{.directory = "ckpt", .save_best_only = true, .monitor = "val_accuracy"}

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include "strata/core/error.hpp"
#include "strata/io/checkpoint_manager.hpp"
#include "strata/io/training_state.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/monitor.hpp"

namespace strata::train {

struct ModelCheckpoint {
  std::filesystem::path directory = "checkpoints";
  std::int64_t every_steps = 0;   // 0: at the end of every epoch; N: after every N-th optimizer step
  bool save_best_only = false;    // at epoch end, only when `monitor` improved
  std::string monitor = "val_loss";
  MonitorMode mode = MonitorMode::automatic;
  bool save_weights_only = false; // leave out the optimizer state and progress
  int max_to_keep = 5;

  // Read after training.
  std::optional<std::filesystem::path> last_saved{};
  double best = std::numeric_limits<double>::quiet_NaN();
  int saves = 0;
  // Set up by on_train_begin (public only so the options stay designated-initialisable).
  std::optional<io::CheckpointManager> manager{};
  std::int64_t last_step = -1;
  bool writer = true;  // the chief of a job; the other workers write nothing
  int validation_freq = 0;  // the run's (TrainBegin)

  void on_train_begin(TrainBegin const& info, io::TrainingState const& state) {
    writer = info.chief();
    if (every_steps < 0)
      throw ConfigError(strata::detail::message("ModelCheckpoint: every_steps ", every_steps, " must be >= 0"));
    if (save_best_only && every_steps != 0)
      throw ConfigError("ModelCheckpoint: save_best_only compares epoch metrics; use it with every_steps = 0");
    manager.emplace(directory, max_to_keep);
    best = std::numeric_limits<double>::quiet_NaN();
    last_step = -1;
    // A resumed run (BackupAndRestore listed before this callback) carries the history of
    // its completed epochs: the best so far is the one to beat.
    validation_freq = info.validation_freq;
    if (auto const it = state.progress.history.find(monitor); save_best_only && it != state.progress.history.end())
      for (double value : it->second)
        if (improves(value, best, monitor, mode)) best = value;
  }

  void on_batch_end(BatchLogs const&, io::TrainingState const& state) {
    if (writer && state.step_due(every_steps)) save(state);
  }

  void on_epoch_end(EpochLogs const& logs, io::TrainingState const& state) {
    if (every_steps > 0 || !writer) return;
    if (save_best_only) {
      auto const value = monitored_value(logs, monitor, validation_freq, "ModelCheckpoint");
      if (!value || !improves(*value, best, monitor, mode)) return;  // unmeasured after this epoch, or no better
      best = *value;
    }
    save(state);
  }

 private:
  void save(io::TrainingState const& state) {
    if (state.progress.step == last_step) return;  // nothing changed since the last save
    if (save_weights_only) {
      io::TrainingState weights;
      weights.model = state.model;
      weights.config = state.config;
      weights.weights = state.weights;
      weights.progress = state.progress;  // metadata only: where training was
      last_saved = manager->save(weights);
    } else if (state.kept.empty()) {
      last_saved = manager->save(state);
    } else {  // what callbacks keep for a restart is BackupAndRestore's to save
      io::TrainingState run = state;  // (views, and the progress)
      run.kept.clear();
      last_saved = manager->save(run);
    }
    last_step = state.progress.step;
    ++saves;
  }
};

}  // namespace strata::train
