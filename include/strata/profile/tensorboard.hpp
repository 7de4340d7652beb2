#pragma once
// TensorBoard{"logs/"}: the Keras callback's scalars, plus what monitoring adds, as event
// files TensorBoard reads (`tensorboard --logdir logs/`). Written by the chief only.
//
//   logs/train/       epoch_loss, epoch_accuracy, epoch_learning_rate, and from the run's
//                     profile epoch_step_time_ms, epoch_data_wait_ms, epoch_all_reduce_p50_ms,
//                     epoch_all_reduce_p99_ms, epoch_all_reduce_bus_gbps, epoch_peak_rss_mb,
//                     epoch_rss_mb, epoch_loss_scale (where there is one);
//                     every `update_freq` batches the same as batch_* at the batch's step
//   logs/validation/  epoch_loss, epoch_accuracy (with FitOptions::validation);
//                     evaluation_loss_vs_iterations, evaluation_accuracy_vs_iterations from a
//                     SidecarEvaluator, at the checkpoint's optimizer step (Keras' names)
//
// Epoch scalars are at step = epoch (0-based), as Keras writes them; batch scalars at the
// number of batches trained in the run. Communication and memory figures are this process's.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "strata/profile/event_file.hpp"
#include "strata/profile/report.hpp"
#include "strata/profile/run_profile.hpp"
#include "strata/train/logs.hpp"

namespace strata::profile {

struct TensorBoardOptions {
  int update_freq = 0;  // > 0: batch scalars every this many batches; 0: epoch scalars only
};

class TensorBoard {
 public:
  explicit TensorBoard(std::filesystem::path log_dir, TensorBoardOptions options = {})
      : log_dir_(std::move(log_dir)), options_(options) {
    if (options_.update_freq < 0)
      throw ConfigError(strata::detail::message("TensorBoard: update_freq ", options_.update_freq,
                                                " must be >= 0 (0: once per epoch)"));
  }

  void on_train_begin(train::TrainBegin const& info) {
    chief_ = info.chief();
    if (!chief_) return;
    train_.emplace(log_dir_ / "train");
    validation_.emplace(log_dir_ / "validation");
  }

  void on_step_profile(StepProfile const& step) {
    if (!chief_) return;
    for (Window* w : {&window_, &epoch_}) w->add(step);
    latest_ = step;
    latest_.spans = {};  // not kept past the call
  }

  void on_batch_end(train::BatchLogs const& logs) {
    if (!chief_) return;
    ++batches_;
    if (options_.update_freq > 0 && batches_ % options_.update_freq == 0) {
      write(*train_, "batch_", batches_, logs.loss, logs.accuracy, window_);
      train_->flush();
    }
    window_ = {};
  }

  void on_epoch_end(train::EpochLogs const& logs) {
    if (!chief_) return;
    write(*train_, "epoch_", logs.epoch, logs.loss, logs.accuracy, epoch_);
    if (logs.val_loss) validation_->scalar("epoch_loss", logs.epoch, *logs.val_loss);
    if (logs.val_accuracy) validation_->scalar("epoch_accuracy", logs.epoch, *logs.val_accuracy);
    train_->flush();
    validation_->flush();
    epoch_ = {};
  }

  void on_train_end(train::History const&) {
    if (!chief_) return;
    train_.reset();
    validation_.reset();
  }

  // A SidecarEvaluator's checkpoint (train/sidecar_evaluator.hpp).
  void on_checkpoint_evaluated(train::CheckpointEvaluation const& e) {
    if (!evaluation_) evaluation_.emplace(log_dir_ / "validation");
    evaluation_->scalar("evaluation_loss_vs_iterations", e.step, e.evaluation.loss);
    if (e.evaluation.accuracy) evaluation_->scalar("evaluation_accuracy_vs_iterations", e.step, *e.evaluation.accuracy);
    evaluation_->flush();
  }

  [[nodiscard]] std::filesystem::path const& log_dir() const { return log_dir_; }

 private:
  // Figures gathered over a window of batches (every update_freq batches, or an epoch).
  struct Window {
    std::vector<double> step_ms, data_wait_ms, all_reduce_ms, bus;
    void add(StepProfile const& step) {
      for (Span const& s : step.spans) {
        if (s.replica < 0 && s.phase == Phase::step) step_ms.push_back(s.seconds() * 1e3);
        if (s.replica < 0 && s.phase == Phase::data_wait) data_wait_ms.push_back(s.seconds() * 1e3);
        if (s.phase == Phase::all_reduce) {
          all_reduce_ms.push_back(s.seconds() * 1e3);
          bus.push_back(bus_bandwidth(double(s.bytes), s.seconds(), step.world));
        }
      }
    }
  };

  void write(EventFileWriter& file, std::string const& prefix, std::int64_t step, double loss,
             std::optional<double> accuracy, Window const& w) {
    auto const mean = [](std::vector<double> const& v) {
      double s = 0.0;
      for (double x : v) s += x;
      return v.empty() ? 0.0 : s / double(v.size());
    };
    file.scalar(prefix + "loss", step, loss);
    if (accuracy) file.scalar(prefix + "accuracy", step, *accuracy);
    if (!std::isnan(latest_.learning_rate)) file.scalar(prefix + "learning_rate", step, latest_.learning_rate);
    if (latest_.loss_scale) file.scalar(prefix + "loss_scale", step, *latest_.loss_scale);
    if (!w.step_ms.empty()) file.scalar(prefix + "step_time_ms", step, mean(w.step_ms));
    if (!w.data_wait_ms.empty()) file.scalar(prefix + "data_wait_ms", step, mean(w.data_wait_ms));
    if (!w.all_reduce_ms.empty()) {
      Percentiles const p = percentiles(w.all_reduce_ms);
      file.scalar(prefix + "all_reduce_p50_ms", step, p.p50);
      file.scalar(prefix + "all_reduce_p99_ms", step, p.p99);
      file.scalar(prefix + "all_reduce_bus_gbps", step, percentiles(w.bus).p50 * 1e-9);
    }
    file.scalar(prefix + "peak_rss_mb", step, double(latest_.memory.peak_rss) * 1e-6);
    file.scalar(prefix + "rss_mb", step, double(latest_.memory.rss) * 1e-6);
    if (latest_.memory.device >= 0) file.scalar(prefix + "device_memory_mb", step, double(latest_.memory.device) * 1e-6);
  }

  std::filesystem::path log_dir_;
  TensorBoardOptions options_;
  bool chief_ = true;
  std::optional<EventFileWriter> train_, validation_, evaluation_;
  std::int64_t batches_ = 0;
  StepProfile latest_{};
  Window window_, epoch_;
};

}  // namespace strata::profile
