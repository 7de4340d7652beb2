#pragma once
// SidecarEvaluator: a dedicated evaluator beside a training job (Keras' SidecarEvaluator).
// It watches where training writes checkpoints, loads the newest one it has not evaluated,
// evaluates it on its own data with its own trainer's strategy, reports it, and waits for
// the next. Training never pauses for it, and it never writes where training writes.
//
//   strata::Trainer<strata::Mirrored<2>> trainer;        // the evaluator's own strategy
//   Model model(/*seed=*/0);                             // the weights come from the files
//   strata::SidecarEvaluator sidecar{.checkpoint = "run/ckpt", .until_epochs = 10};
//   strata::SidecarReport report = sidecar.run(trainer, model, loss, test, strata::TensorBoard{"logs"});
//
// `checkpoint` is either a directory of numbered checkpoints, <prefix>-<step>.safetensors
// (ModelCheckpoint's and CheckpointManager's "ckpt", BackupAndRestore's "backup"), or one
// file that training replaces in place (the ParameterServer job's JobOptions::checkpoint).
// Like Keras' evaluator it always takes the newest, so it skips checkpoints written while it
// evaluated. Checkpoints are written atomically, so a file is whole or absent:
//   - a file removed between listing and reading (max_to_keep rotation) is looked for again;
//   - a damaged file (IoError) is reported in SidecarReport::skipped and passed over for
//     the newest readable one before it (where that was not evaluated yet) or a newer one;
//   - a checkpoint of another model (ConfigError, ShapeError) is thrown at once: that is
//     the evaluator's configuration, and no later file will fix it.
// It stops after the checkpoint that reaches `until_step` or `until_epochs`, after
// `max_evaluations`, when no new checkpoint came for `idle_timeout`, when `stop` is
// requested, or when a callback's on_checkpoint_evaluated returns true; with none of these
// it evaluates until the process ends, as Keras' does.

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/data/dataset.hpp"
#include "strata/io/checkpoint.hpp"
#include "strata/io/checkpoint_manager.hpp"
#include "strata/io/training_state.hpp"
#include "strata/nn/loss.hpp"
#include "strata/train/callback.hpp"
#include "strata/train/logs.hpp"

namespace strata::train {

// Why SidecarEvaluator::run returned.
enum class SidecarStop { until_step, until_epochs, max_evaluations, idle_timeout, stop_requested, callback };

struct SidecarReport {
  std::vector<CheckpointEvaluation> evaluations;                        // in the order evaluated
  std::vector<std::pair<std::filesystem::path, std::string>> skipped;  // damaged files, with why
  SidecarStop stopped_by = SidecarStop::idle_timeout;
};

// A callback of the evaluator: a type with on_checkpoint_evaluated(CheckpointEvaluation
// const&) (TensorBoard has one), or a function of a CheckpointEvaluation const&; either may
// return true to stop the evaluator.
template <class C>
concept SidecarCallback = requires(C& c, CheckpointEvaluation const& e) { c.on_checkpoint_evaluated(e); } ||
                          std::is_invocable_v<C&, CheckpointEvaluation const&>;

namespace detail {
// Calls a sidecar callback; returns whether it asked to stop.
template <class C>
bool report_to(C& callback, CheckpointEvaluation const& e) {
  return call_hook([&]() -> decltype(auto) {
    if constexpr (requires { callback.on_checkpoint_evaluated(e); }) return callback.on_checkpoint_evaluated(e);
    else return callback(e);
  });
}
}  // namespace detail

struct SidecarEvaluator {
  std::filesystem::path checkpoint;   // a directory of numbered checkpoints, or one file (*.safetensors)
  std::string prefix = "ckpt";        // of the numbered files in a directory; "backup" for BackupAndRestore's
  int batch_size = 256;
  std::optional<std::int64_t> until_step{};    // stop after a checkpoint at this optimizer step or later
  std::optional<std::int64_t> until_epochs{};  // stop after a checkpoint of a run this many epochs in
  int max_evaluations = 0;                     // 0: no limit
  std::chrono::milliseconds poll{500};         // how often to look for a new checkpoint
  std::optional<std::chrono::milliseconds> idle_timeout{};  // stop when none came for this long; nullopt: wait on
  std::stop_token stop{};                      // another thread may end the wait (std::jthread's token)

  // Evaluates the checkpoints as they come; `model` receives each one's weights (a failed
  // read leaves it as it was). Evaluation runs in `trainer`'s strategy and precision.
  template <class Trainer, class Model, nn::Loss LossFn, class... Cs>
  SidecarReport run(Trainer& trainer, Model& model, LossFn const& loss, data::Dataset const& data,
                    Cs&&... callbacks) const {
    constexpr bool evaluates = requires { trainer.evaluate(model, loss, data, batch_size); };
    constexpr bool callbacks_fit = (SidecarCallback<std::remove_cvref_t<Cs>> && ...);
    static_assert(evaluates, "strata::SidecarEvaluator::run: its first argument is the trainer that evaluates each "
                             "checkpoint, e.g. strata::Trainer<strata::Mirrored<2>>");
    static_assert(callbacks_fit,
                  "strata::SidecarEvaluator::run: an argument after the data is not a sidecar callback; a sidecar "
                  "callback has on_checkpoint_evaluated(strata::CheckpointEvaluation const&), as TensorBoard does, or "
                  "is a function of a strata::CheckpointEvaluation const&");
    if constexpr (evaluates && callbacks_fit) return watch(trainer, model, loss, data, callbacks...);
    else return {};  // (only the sentence above is reported)
  }

 private:
  template <class Trainer, class Model, class LossFn, class... Cs>
  SidecarReport watch(Trainer& trainer, Model& model, LossFn const& loss, data::Dataset const& data,
                      Cs&... callbacks) const {
    check();
    // Processes that each poll on their own could pick different checkpoints, and then
    // their evaluations' collectives would not match.
    if constexpr (requires { Trainer::num_replicas; })
      if (trainer.num_replicas_in_sync() != Trainer::num_replicas)
        throw ConfigError(strata::detail::message(
            "SidecarEvaluator: its trainer spans ", trainer.num_replicas_in_sync() / Trainer::num_replicas,
            " processes; the evaluator is one process: give it a one-process strategy, e.g. "
            "strata::Trainer<strata::Mirrored<2>>, and start it outside the training job"));
    SidecarReport report;
    std::set<std::string> unreadable;  // damaged files: not read again
    std::optional<std::string> last_seen;
    std::optional<std::int64_t> last_step;
    auto idle_since = std::chrono::steady_clock::now();
    std::mutex mutex;  // only for the wait below, which a stop request ends early
    std::condition_variable_any woken;
    for (;;) {
      if (stop.stop_requested()) return stopped(report, SidecarStop::stop_requested);
      std::optional<Candidate> const newest = find_newest(unreadable, last_step);
      if (newest && newest->identity != last_seen) {
        io::TrainingState state = io::training_state(model);
        try {
          io::load_checkpoint(newest->path, state);
        } catch (IoError const& e) {
          std::error_code error;
          if (!std::filesystem::exists(std::filesystem::symlink_status(newest->path, error))) continue;  // rotated away
          report.skipped.emplace_back(newest->path, e.what());
          unreadable.insert(newest->identity);
          continue;
        }
        last_seen = newest->identity;
        io::Progress const& p = state.progress;
        if (p.step == last_step) continue;  // the same weights, written again
        last_step = p.step;
        CheckpointEvaluation const done{newest->path.string(), p.step, p.epoch, p.batch,
                                        trainer.evaluate(model, loss, data, batch_size)};
        report.evaluations.push_back(done);
        idle_since = std::chrono::steady_clock::now();
        bool stop_asked = false;  // every callback sees it, even after one asks to stop
        ((stop_asked |= detail::report_to(callbacks, done)), ...);
        if (until_step && p.step >= *until_step) return stopped(report, SidecarStop::until_step);
        if (until_epochs && p.epoch >= *until_epochs) return stopped(report, SidecarStop::until_epochs);
        if (max_evaluations > 0 && std::ssize(report.evaluations) >= max_evaluations)
          return stopped(report, SidecarStop::max_evaluations);
        if (stop_asked) return stopped(report, SidecarStop::callback);
        continue;
      }
      auto wait = poll;
      if (idle_timeout) {
        auto const left = *idle_timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                              std::chrono::steady_clock::now() - idle_since);
        if (left <= std::chrono::milliseconds(0)) return stopped(report, SidecarStop::idle_timeout);
        wait = std::min(wait, left);
      }
      std::unique_lock lock(mutex);
      woken.wait_for(lock, stop, wait, [] { return false; });
    }
  }

  // A checkpoint to consider: its path, and what tells a new write from one already seen.
  struct Candidate {
    std::filesystem::path path;
    std::string identity;
  };

  [[nodiscard]] bool watches_one_file() const {
    std::error_code error;
    if (std::filesystem::is_directory(checkpoint, error)) return false;
    return std::filesystem::is_regular_file(checkpoint, error) || checkpoint.extension() == ".safetensors";
  }

  // The newest checkpoint not known to be damaged; in a directory, never one older than
  // the last evaluated.
  [[nodiscard]] std::optional<Candidate> find_newest(std::set<std::string> const& unreadable,
                                                     std::optional<std::int64_t> last_step) const {
    bool const one_file = watches_one_file();
    std::vector<std::filesystem::path> const paths =
        one_file ? std::vector{checkpoint} : io::numbered_checkpoints(checkpoint, prefix);
    for (auto it = paths.rbegin(); it != paths.rend(); ++it) {
      if (!one_file && last_step && *io::checkpoint_step(*it, prefix) < *last_step) break;
      // The name, inode, size and modification time: a file replaced in place (atomically,
      // by rename) gets a new inode, and one written again at the same step is a new write.
      struct ::stat s{};
      if (::stat(it->c_str(), &s) != 0) continue;  // not there (yet), or just rotated away
      std::string identity = strata::detail::message(it->filename().string(), ':', s.st_ino, ':', s.st_size, ':',
                                                     s.st_mtim.tv_sec, '.', s.st_mtim.tv_nsec);
      if (!unreadable.contains(identity)) return Candidate{*it, std::move(identity)};
    }
    return std::nullopt;
  }

  void check() const {
    auto fail = [](auto const&... what) { throw ConfigError(strata::detail::message("SidecarEvaluator: ", what...)); };
    if (checkpoint.empty())
      fail("no checkpoint to watch; set .checkpoint to the directory ModelCheckpoint writes, or the job's file");
    if (prefix.empty() || prefix.find('/') != std::string::npos)
      fail("prefix '", prefix, "' must be a non-empty file name, e.g. \"ckpt\" or \"backup\"");
    if (batch_size < 1) fail("batch_size ", batch_size, " must be >= 1");
    if (until_step && *until_step < 0) fail("until_step ", *until_step, " must be >= 0");
    if (until_epochs && *until_epochs < 0) fail("until_epochs ", *until_epochs, " must be >= 0");
    if (max_evaluations < 0) fail("max_evaluations ", max_evaluations, " must be >= 0 (0: no limit)");
    if (poll <= std::chrono::milliseconds(0)) fail("poll ", poll.count(), " ms must be > 0");
    if (idle_timeout && *idle_timeout < std::chrono::milliseconds(0))
      fail("idle_timeout ", idle_timeout->count(), " ms must be >= 0");
  }

  static SidecarReport stopped(SidecarReport& report, SidecarStop why) {
    report.stopped_by = why;
    return std::move(report);
  }
};

}  // namespace strata::train
