#pragma once
// What training reports: per-batch and per-epoch logs, and the History fit returns.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::train {

// Handed to on_train_begin.
// Whether a run validating after every `validation_freq`-th epoch (0: never) validates after
// epoch `epoch` (0-based), as Keras' validation_freq: epochs freq - 1, 2 freq - 1, ...
[[nodiscard]] inline bool validates_after(std::int64_t epoch, int validation_freq) {
  return validation_freq > 0 && (epoch + 1) % validation_freq == 0;
}

struct TrainBegin {
  int epochs = 0;
  std::int64_t steps_per_epoch = 0;  // global batches per epoch (one pass, or FitOptions::steps_per_epoch)
  int batch_size = 0;                // global batch size
  int num_replicas = 0;              // replicas in sync across the whole job
  int accumulation_steps = 0;
  int worker = 0;   // this process among the job's (MultiWorkerMirrored); 0 is the chief
  int workers = 1;
  int validation_freq = 0;  // the run validates after every this-many-th epoch; 0: it has no validation
  // Side effects (drawing, logging, writing checkpoints) are the chief's alone.
  [[nodiscard]] bool chief() const { return worker == 0; }
};

// Handed to on_batch_end after every global batch; metrics are running means over the epoch.
struct BatchLogs {
  int epoch = 0;                  // 0-based
  int epochs = 0;
  std::int64_t step = 0;          // 1-based within the epoch
  std::int64_t steps = 0;         // batches in the epoch
  double loss = 0.0;
  std::optional<double> accuracy{};
  double seconds = 0.0;           // since the epoch began
};

// Handed to on_epoch_end.
struct EpochLogs {
  int epoch = 0;  // 0-based
  int epochs = 0;
  std::int64_t steps = 0;
  double seconds = 0.0;
  double loss = 0.0;
  std::optional<double> accuracy{};
  std::optional<double> val_loss{};
  std::optional<double> val_accuracy{};

  // The metric called `name` ("loss", "accuracy", "val_loss", "val_accuracy"), if this run has it.
  [[nodiscard]] std::optional<double> get(std::string_view name) const {
    if (name == "loss") return loss;
    if (name == "accuracy") return accuracy;
    if (name == "val_loss") return val_loss;
    if (name == "val_accuracy") return val_accuracy;
    return std::nullopt;
  }
  // The names of the metrics present, in a stable order.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (char const* n : {"loss", "accuracy", "val_loss", "val_accuracy"})
      if (get(n)) out.emplace_back(n);
    return out;
  }
};

// Per-epoch metrics, as Keras' History.history: history["val_accuracy"].back().
class History {
 public:
  void append(EpochLogs const& logs) {
    for (auto const& name : logs.names()) metrics_[name].push_back(*logs.get(name));
    seconds_.push_back(logs.seconds);
  }
  [[nodiscard]] int epochs() const { return int(seconds_.size()); }
  [[nodiscard]] bool contains(std::string const& name) const { return metrics_.count(name) != 0; }
  [[nodiscard]] std::vector<double> const& operator[](std::string const& name) const {
    auto it = metrics_.find(name);
    if (it == metrics_.end())
      throw Error(strata::detail::message("History: no metric '", name,
                                  "' in this run (it has loss, and accuracy/val_* when the loss and data provide them)"));
    return it->second;
  }
  [[nodiscard]] std::map<std::string, std::vector<double>> const& metrics() const { return metrics_; }
  [[nodiscard]] std::vector<double> const& epoch_seconds() const { return seconds_; }

  // The metrics and the epoch times ("seconds") in one map, as checkpoints store them.
  [[nodiscard]] std::map<std::string, std::vector<double>> to_map() const {
    auto all = metrics_;
    all["seconds"] = seconds_;
    return all;
  }
  [[nodiscard]] static History from_map(std::map<std::string, std::vector<double>> all) {
    History h;
    if (auto it = all.find("seconds"); it != all.end()) {
      h.seconds_ = std::move(it->second);
      all.erase(it);
    }
    h.metrics_ = std::move(all);
    return h;
  }

 private:
  std::map<std::string, std::vector<double>> metrics_;
  std::vector<double> seconds_;
};

// What evaluate returns.
struct Evaluation {
  double loss = 0.0;  // mean over samples
  std::optional<double> accuracy{};
  std::int64_t samples = 0;
};

// One checkpoint a SidecarEvaluator evaluated (train/sidecar_evaluator.hpp), handed to its
// callbacks' on_checkpoint_evaluated: where training was when the file was written, and
// what evaluating its weights gave.
struct CheckpointEvaluation {
  std::string path;          // the file read
  std::int64_t step = 0;     // optimizer steps the run had taken
  std::int64_t epoch = 0;    // the epoch in progress (the epochs completed when batch == 0)
  std::int64_t batch = 0;    // batches of that epoch already trained
  Evaluation evaluation;
};

}  // namespace strata::train
