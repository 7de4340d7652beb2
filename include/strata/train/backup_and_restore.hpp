#pragma once
// BackupAndRestore: fault tolerance for fit (Keras' BackupAndRestore). It backs the run up
// at every epoch end (and every N optimizer steps if asked); when fit starts and a backup
// exists, it restores it — weights, optimizer state, the step and epoch, the position in
// the epoch's shuffled order, the dropout stream and the history — so the restarted run
// continues bit for bit where the lost one was. A finished run deletes its backup.
//
//   trainer.fit(model, opt, loss, train, options, strata::BackupAndRestore{.directory = "backup"});

#include <cstdint>
#include <filesystem>
#include <optional>

#include "strata/core/error.hpp"
#include "strata/io/checkpoint_manager.hpp"
#include "strata/io/training_state.hpp"
#include "strata/train/logs.hpp"

namespace strata::train {

struct BackupAndRestore {
  std::filesystem::path directory = "backup";
  std::int64_t every_steps = 0;    // 0: at epoch ends only; N: also after every N-th optimizer step
  bool delete_on_success = true;   // remove the backup once fit completes (Keras' delete_checkpoint)
  int max_to_keep = 2;             // the backup before survives a damaged newest one

  // Read after fit: what was restored (nullopt: a fresh start) and what was skipped as damaged.
  std::optional<io::RestoreReport> restored{};
  // Set up by on_train_begin (public only so the options stay designated-initialisable).
  std::optional<io::CheckpointManager> manager{};
  std::int64_t last_step = -1;
  bool writer = true;  // the chief of a job writes the backups; every worker restores from them

  void on_train_begin(TrainBegin const& info, io::TrainingState& state) {
    writer = info.chief();
    if (every_steps < 0)
      throw ConfigError(strata::detail::message("BackupAndRestore: every_steps ", every_steps, " must be >= 0"));
    manager.emplace(directory, max_to_keep, "backup");
    io::Progress const run = state.progress;
    last_step = -1;
    restored = manager->restore(state, [&](io::Progress const& saved) {
      // Each of these places the restored position elsewhere in the data.
      if (saved.seed != run.seed || saved.batch_size != run.batch_size || saved.steps_per_epoch != run.steps_per_epoch)
        throw ConfigError(strata::detail::message(
            "BackupAndRestore: the backup in ", directory.string(), " was written by a run with seed ", saved.seed,
            ", batch_size ", saved.batch_size, " and steps_per_epoch ", saved.steps_per_epoch, "; this run has seed ",
            run.seed, ", batch_size ", run.batch_size, " and steps_per_epoch ", run.steps_per_epoch,
            ". Resume with the same FitOptions, or delete the directory to start over"));
    });
    if (restored) last_step = state.progress.step;
  }

  void on_batch_end(BatchLogs const&, io::TrainingState const& state) {
    if (state.step_due(every_steps)) backup(state);
  }

  void on_epoch_end(EpochLogs const&, io::TrainingState const& state) { backup(state, /*always=*/true); }

  void on_train_end(History const&, io::TrainingState const&) {
    if (delete_on_success && writer) manager->clear();
  }

 private:
  void backup(io::TrainingState const& state, bool always = false) {
    if (!writer || (!always && state.progress.step == last_step)) return;
    manager->save(state);
    last_step = state.progress.step;
  }
};

}  // namespace strata::train
