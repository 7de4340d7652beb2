#pragma once
// save_checkpoint / load_checkpoint: a TrainingState to and from one safetensors file.
//
// Tensors: the weights under their layer names ("dense_0/kernel", Keras' (In, Out) layout),
// the optimizer's slots under "optimizer/<weight>/<slot>". Metadata: the format, the
// model, optimizer and policies, the Progress (step, epoch, position in the epoch, the RNG
// state, the epoch's running metrics, the history) and the loss-scale state. Weights are
// stored once, so a checkpoint written by Mirrored<4> loads into OneDevice or Mirrored<2>.
//
// Loading checks everything — format, model, every name and shape, the checksum — before
// it writes a single float, so a bad file leaves the model and optimizer as they were.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/io/json.hpp"
#include "strata/io/safetensors.hpp"
#include "strata/io/training_state.hpp"

namespace strata::io {

inline constexpr char const* checkpoint_format = "strata-checkpoint";
inline constexpr int checkpoint_version = 1;

namespace detail {

inline std::string exact(double value) {  // round-trips bit for bit
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// The double `text` spells in full (as exact() writes it), or false.
inline bool parse_exact(std::string const& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

inline Metadata progress_metadata(Progress const& p) {
  // {"loss": ["0.51", ...], ...}: values as exact decimal strings, since JSON numbers cannot hold a NaN loss.
  std::string history = "{";
  for (auto const& [name, values] : p.history) {
    history.append(history.size() > 1 ? "," : "").append(json::quote(name)).append(":[");
    for (std::size_t i = 0; i < values.size(); ++i) history.append(i ? "," : "").append(json::quote(exact(values[i])));
    history += "]";
  }
  history += "}";
  return {{"step", std::to_string(p.step)},
          {"epoch", std::to_string(p.epoch)},
          {"batch", std::to_string(p.batch)},
          {"batch_size", std::to_string(p.batch_size)},
          {"steps_per_epoch", std::to_string(p.steps_per_epoch)},
          {"rng_seed", std::to_string(p.seed)},
          {"rng_counter", std::to_string(p.micro_batches)},
          {"epoch_loss_sum", exact(p.epoch_loss_sum)},
          {"epoch_correct", std::to_string(p.epoch_correct)},
          {"epoch_samples", std::to_string(p.epoch_samples)},
          {"history", history},
          // "none", or the scale with its growth counter and the steps skipped so far.
          {"loss_scale", p.loss_scale ? exact(p.loss_scale->scale) : "none"},
          {"loss_scale_good_steps", std::to_string(p.loss_scale ? p.loss_scale->good_steps : 0)},
          {"skipped_steps", std::to_string(p.loss_scale ? p.loss_scale->skipped_steps : 0)}};
}

class MetadataReader {
 public:
  explicit MetadataReader(SafetensorsFile const& file) : file_(file) {}

  [[nodiscard]] std::string const& text(std::string const& key) const {
    auto const it = file_.metadata().find(key);
    if (it == file_.metadata().end())
      throw IoError(strata::detail::message(file_.source(), ": the metadata has no '", key,
                                            "' (not a complete strata checkpoint)"));
    return it->second;
  }
  template <class Int>
  [[nodiscard]] Int integer(std::string const& key) const {
    std::string const& s = text(key);
    Int value{};
    auto const [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (error != std::errc{} || end != s.data() + s.size())
      throw IoError(strata::detail::message(file_.source(), ": metadata '", key, "' = '", s, "' is not an integer"));
    return value;
  }
  [[nodiscard]] double real(std::string const& key) const {
    std::string const& s = text(key);
    double value = 0.0;
    if (!parse_exact(s, value))
      throw IoError(strata::detail::message(file_.source(), ": metadata '", key, "' = '", s, "' is not a number"));
    return value;
  }

  [[nodiscard]] Progress progress() const {
    Progress p;
    p.step = integer<std::int64_t>("step");
    p.epoch = integer<std::int64_t>("epoch");
    p.batch = integer<std::int64_t>("batch");
    p.batch_size = integer<std::int64_t>("batch_size");
    // Absent from checkpoints written before FitOptions::steps_per_epoch: epochs were passes.
    if (file_.metadata().count("steps_per_epoch")) p.steps_per_epoch = integer<std::int64_t>("steps_per_epoch");
    p.seed = integer<std::uint64_t>("rng_seed");
    p.micro_batches = integer<std::int64_t>("rng_counter");
    p.epoch_loss_sum = real("epoch_loss_sum");
    p.epoch_correct = integer<std::int64_t>("epoch_correct");
    p.epoch_samples = integer<std::int64_t>("epoch_samples");
    json::Value const history = json::parse(text("history"), file_.source() + " (metadata 'history')");
    bool valid = history.is_object();
    for (auto const& [name, values] : history.members) {
      valid = valid && values.is_array();
      for (auto const& v : values.items) {
        double value = 0.0;
        valid = valid && v.is_string() && parse_exact(v.text, value);
        p.history[name].push_back(value);
      }
    }
    if (!valid)
      throw IoError(strata::detail::message(file_.source(), ": metadata 'history' is not a map of metric lists"));
    if (text("loss_scale") != "none") {
      double const scale = real("loss_scale");
      p.loss_scale = LossScaleState{float(scale), integer<std::int64_t>("loss_scale_good_steps"),
                                    integer<std::int64_t>("skipped_steps")};
      if (!(scale >= 1.0) || !std::isfinite(scale) || p.loss_scale->good_steps < 0 || p.loss_scale->skipped_steps < 0)
        throw IoError(strata::detail::message(file_.source(), ": metadata loss_scale ", text("loss_scale"),
                                              " with counters ", p.loss_scale->good_steps, ", ",
                                              p.loss_scale->skipped_steps, " is not a loss-scale state (scale >= 1)"));
    }
    if (p.step < 0 || p.epoch < 0 || p.batch < 0 || p.micro_batches < 0 || p.batch_size < 0 || p.steps_per_epoch < 0)
      throw IoError(strata::detail::message(file_.source(), ": negative step, epoch, batch or counter in the metadata"));
    return p;
  }

 private:
  SafetensorsFile const& file_;
};

}  // namespace detail

// Writes `state` to `path` atomically: a crash leaves the old file or the new one.
inline void save_checkpoint(std::filesystem::path const& path, TrainingState const& state) {
  std::vector<TensorRef> tensors;
  for (auto const* group : {&state.weights, &state.optimizer_slots, &state.kept})
    for (auto const& t : *group) tensors.push_back({t.name, t.shape, t.values});
  Metadata metadata = detail::progress_metadata(state.progress);
  metadata["format"] = checkpoint_format;
  metadata["format_version"] = std::to_string(checkpoint_version);
  metadata["model"] = state.model;
  metadata["optimizer"] = state.optimizer;
  metadata["config"] = state.config;
  write_safetensors(path, tensors, std::move(metadata));
}

// Loads `path` into `state`: the weights, the optimizer slots when `state` has an optimizer,
// and the progress. Throws (IoError for the file, ShapeError or ConfigError for a checkpoint
// of another model or optimizer) before changing anything; so does `check(progress)`, which
// sees the checkpoint's progress before anything is copied.
template <class Check = void (*)(Progress const&)>
void load_checkpoint(std::filesystem::path const& path, TrainingState& state, Check&& check = [](Progress const&) {}) {
  SafetensorsFile const file = SafetensorsFile::read(path);
  detail::MetadataReader const meta(file);
  auto const format = file.metadata().find("format");
  if (format == file.metadata().end() || format->second != checkpoint_format || !file.has_checksum())
    throw IoError(strata::detail::message(path.string(), ": not a strata checkpoint (no \"format\": \"", checkpoint_format,
                                          "\" and checksum in its metadata); write it with strata::save_checkpoint"));
  if (auto const version = meta.integer<int>("format_version"); version != checkpoint_version)
    throw IoError(strata::detail::message(path.string(), ": checkpoint format version ", version,
                                          "; this strata reads version ", checkpoint_version));
  if (std::string const& model = meta.text("model"); model != state.model)
    throw ConfigError(strata::detail::message(path.string(), ": the checkpoint holds ", model, ", but the model is ",
                                              state.model));
  std::string const& optimizer = meta.text("optimizer");
  std::vector<std::pair<std::span<float const>, std::span<float>>> copies;
  for (auto const& t : state.weights) copies.emplace_back(file.f32(t.name, t.shape), t.values);
  for (auto const& t : state.optimizer_slots) {
    if (!file.contains(t.name))
      throw ConfigError(strata::detail::message(
          path.string(), ": the checkpoint has no '", t.name, "'; it holds the state of optimizer '",
          optimizer.empty() ? "none (weights only)" : optimizer, "', the run uses ", state.optimizer));
    copies.emplace_back(file.f32(t.name, t.shape), t.values);
  }
  std::map<std::string, std::vector<float>> kept;  // what callbacks kept (TrainingState::kept)
  for (std::string const& name : file.names())
    if (name.starts_with(kept_prefix)) kept[name] = file.floats(name, file.shape(name));
  Progress const progress = meta.progress();
  check(progress);
  for (auto const& [from, to] : copies) std::copy(from.begin(), from.end(), to.begin());
  state.progress = progress;
  state.restored_kept = std::move(kept);
}

// Weights only, for inference or fine-tuning.
template <class Model>
void save_checkpoint(std::filesystem::path const& path, Model const& model) {
  save_checkpoint(path, training_state(const_cast<Model&>(model)));  // views only read when saving
}
template <class Model>
void load_checkpoint(std::filesystem::path const& path, Model& model) {
  TrainingState state = training_state(model);
  load_checkpoint(path, state);
}

// Weights, optimizer state and progress, for custom training loops.
template <class Model, optim::Optimizer Opt>
void save_checkpoint(std::filesystem::path const& path, Model const& model, Opt const& optimizer,
                     typename Opt::State const& state, Progress const& progress = {}) {
  // Views are only read when saving.
  TrainingState s = training_state(const_cast<Model&>(model), optimizer, const_cast<typename Opt::State&>(state));
  s.progress = progress;
  save_checkpoint(path, s);
}
template <class Model, optim::Optimizer Opt>
Progress load_checkpoint(std::filesystem::path const& path, Model& model, Opt const& optimizer,
                         typename Opt::State& state) {
  TrainingState s = training_state(model, optimizer, state);
  load_checkpoint(path, s);
  return s.progress;
}

}  // namespace strata::io
