#pragma once
// TrainingState: what a checkpoint holds, as views of the live training state (no copies).
// fit builds one and hands it to callbacks (ModelCheckpoint, BackupAndRestore); custom
// loops build one with training_state(model, optimizer, state).

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/nn/layer.hpp"
#include "strata/optim/optimizer.hpp"

namespace strata::io {

// The state of a loss scale (train::LossScaler): what checkpoints record and callbacks see.
struct LossScaleState {
  float scale = 1.0f;
  std::int64_t good_steps = 0;     // consecutive finite steps since the scale last changed
  std::int64_t skipped_steps = 0;  // steps skipped for non-finite gradients, in all
};

// Where training stands; written to a checkpoint's metadata. All zero for a fresh run.
struct Progress {
  std::int64_t step = 0;           // optimizer steps taken
  std::int64_t epoch = 0;          // the epoch in progress, 0-based (equal to the epochs asked for once done)
  std::int64_t batch = 0;          // batches of that epoch already trained
  std::int64_t micro_batches = 0;  // global batches trained in all: the counter of the dropout streams
  std::uint64_t seed = 0;          // FitOptions::seed: shuffle orders and dropout masks derive from it
  std::int64_t batch_size = 0;     // the global batch size of the run
  std::int64_t steps_per_epoch = 0;  // FitOptions::steps_per_epoch (0: an epoch is one pass)
  // Running metrics of the epoch in progress, so the resumed epoch reports the same numbers.
  double epoch_loss_sum = 0.0;
  std::int64_t epoch_correct = 0;
  std::int64_t epoch_samples = 0;
  // The per-epoch metrics of the epochs completed (History), by metric name.
  std::map<std::string, std::vector<double>> history{};
  // The loss scale of a precision policy that has one (MixedPrecisionFp16); none otherwise.
  std::optional<LossScaleState> loss_scale{};
};

// A tensor of the live state: a name, a row-major shape and the floats it views.
struct StateTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<float> values;
};

inline constexpr std::string_view kept_prefix = "kept/";

struct TrainingState {
  std::string model;                        // Model::name(): a checkpoint of another model is refused
  std::string optimizer;                    // Opt::name, empty when only weights are saved
  std::string config;                       // the policies of the run (informational)
  std::vector<StateTensor> weights;         // the model's parameters, once (not per replica)
  std::vector<StateTensor> optimizer_slots; // "optimizer/<weight>/<slot>"
  Progress progress{};
  // False between the micro-batches of a GradAccum group: the partial gradients live in
  // per-replica buffers a checkpoint does not hold, so nothing is saved then.
  bool at_step_boundary = true;
  // What a callback keeps across a restart besides the model and the optimizer (EarlyStopping's
  // best weights): views of the callback's own buffers, named "kept/<callback>/...", which a
  // backup saves with the state. Loading a checkpoint puts its tensors of that kind in
  // `restored_kept`, where the callback takes them from in its on_train_begin.
  std::vector<StateTensor> kept{};
  std::map<std::string, std::vector<float>> restored_kept{};

  // Whether a save "every `every_steps` optimizer steps" falls due now (never for 0).
  [[nodiscard]] bool step_due(std::int64_t every_steps) const {
    return every_steps > 0 && at_step_boundary && progress.step > 0 && progress.step % every_steps == 0;
  }
};

namespace detail {

template <class Model>
std::vector<StateTensor> views(Model const& model, std::span<float> arena) {
  std::vector<StateTensor> out;
  for (auto const& t : model.parameter_tensors()) out.push_back({t.name, t.shape, arena.subspan(t.offset, nn::element_count(t.shape))});
  return out;
}

}  // namespace detail

// The weights of `model`. Saving reads through these views; loading writes through them.
template <class Model>
TrainingState training_state(Model& model) {
  TrainingState s;
  s.model = Model::name();
  s.weights = detail::views(model, model.parameters());
  return s;
}

// The weights and the optimizer state (one slot per moment, laid out like the weights).
template <class Model, optim::Optimizer Opt>
TrainingState training_state(Model& model, Opt const&, typename Opt::State& state) {
  TrainingState s = training_state(model);
  s.optimizer = Opt::name;
  state.for_each_slot([&](char const* slot, AlignedBuffer& buffer) {
    for (auto const& w : detail::views(model, buffer.span()))
      s.optimizer_slots.push_back({"optimizer/" + w.name + "/" + slot, w.shape, w.values});
  });
  return s;
}

}  // namespace strata::io
