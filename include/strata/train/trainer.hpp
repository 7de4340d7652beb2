#pragma once
// Trainer<Ps...>: Keras-style fit / evaluate / predict, generated for one combination of
// policies. `Trainer<Mirrored<4>, GradAccum<8>>` and `Trainer<GradAccum<8>, Mirrored<4>>`
// are the same type.
//
//   strata::Trainer<strata::Mirrored<2>> trainer;
//   auto history = trainer.fit(model, strata::Adam{.lr = 1e-3f}, strata::SoftmaxCrossEntropy{}, train,
//                              {.epochs = 10, .batch_size = 128, .validation = test}, strata::ProgressBar{});

#include <chrono>
#include <cmath>
#include <exception>
#include <span>
#include <string>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/data/batch.hpp"
#include "strata/data/dataset.hpp"
#include "strata/nn/loss.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/optim/schedule.hpp"
#include "strata/policy/config.hpp"
#include "strata/strategy/epoch_input.hpp"
#include "strata/strategy/strategy.hpp"
#include "strata/io/training_state.hpp"
#include "strata/profile/memory.hpp"
#include "strata/profile/probe.hpp"
#include "strata/profile/run_profile.hpp"
#include "strata/train/callback.hpp"
#include "strata/train/evaluator.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/step_runner.hpp"

namespace strata::train {

struct FitOptions {
  int epochs = 1;
  int batch_size = 32;                        // global batch: all replicas together, one micro-batch
  std::optional<data::Dataset> validation{};  // evaluated after every epoch (val_loss, val_accuracy)
  // In (0, 1): the last samples of the training dataset, before shuffling, are set apart as
  // the validation data and not trained on (Keras' validation_split: the first
  // ceil(n * (1 - validation_split)) samples train). 0: none. Not with `validation`.
  double validation_split = 0.0;
  bool shuffle = true;                        // a fresh seeded order every epoch
  std::uint64_t seed = 0;                     // shuffling and dropout
  int prefetch = 1;                           // shuffled batches gathered ahead on a background thread
  float clip_global_norm = 0.0f;              // > 0: clip the reduced gradient to this global L2 norm
  profile::StepWindow profile_steps{};        // the steps whose spans on_profile receives (default: all; .every: repeating)
  // > 0: an epoch is this many steps of pass after pass over the data, each reshuffled (Keras'
  // steps_per_epoch on a repeated dataset); 0: an epoch is one pass.
  std::int64_t steps_per_epoch = 0;
  int validation_freq = 1;                    // validate after every this-many-th epoch (Keras' validation_freq)
};

// What every trainer (train::BasicTrainer, and ps/trainer.hpp's) checks and reports alike.
inline void check_fit_options(FitOptions const& options) {
  if (options.epochs < 1) throw ConfigError(strata::detail::message("fit: epochs ", options.epochs, " must be >= 1"));
  if (options.batch_size < 1)
    throw ConfigError(strata::detail::message("fit: batch_size ", options.batch_size, " must be >= 1"));
  options.profile_steps.check("fit: profile_steps");
  if (options.steps_per_epoch < 0)
    throw ConfigError(strata::detail::message("fit: steps_per_epoch ", options.steps_per_epoch,
                                              " must be >= 0 (0: an epoch is one pass over the data)"));
  if (options.validation_freq < 1)
    throw ConfigError(strata::detail::message("fit: validation_freq ", options.validation_freq,
                                              " must be >= 1 (1: validate after every epoch)"));
  if (!(options.validation_split >= 0.0 && options.validation_split < 1.0))
    throw ConfigError(strata::detail::message("fit: validation_split ", options.validation_split,
                                              " must be in [0, 1): the fraction of the training data that validates"));
  if (options.validation_freq != 1 && !options.validation && options.validation_split == 0.0)
    throw ConfigError(strata::detail::message("fit: validation_freq ", options.validation_freq,
                                              " without FitOptions::validation; give the validation dataset"));
}

// The training data and options that fit runs: with validation_split, `train`'s first
// ceil(n * (1 - validation_split)) samples (Keras' formula, so the same samples as Keras
// picks) and the rest as `validation`; else both as given. Both parts must hold a sample,
// and a split with `validation` given as well is refused here (every fit on a Dataset
// splits; per-worker input refuses validation_split).
struct SplitTraining {
  data::Dataset train;
  FitOptions options;
};
// (GCC 12 at -O1, with or without sanitizers, takes the Dataset in the options' optional for
// one that may not be there when it is destroyed: a false maybe-uninitialized.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
[[nodiscard]] inline SplitTraining split_validation(data::Dataset const& train, FitOptions const& options) {
  if (options.validation_split == 0.0) return {train, options};
  if (options.validation)
    throw ConfigError(strata::detail::message("fit: validation_split ", options.validation_split,
                                              " and FitOptions::validation are both given; give one of them"));
  std::size_t const n = train.size();
  auto const kept = std::size_t(std::ceil(double(n) * (1.0 - options.validation_split)));
  if (kept == 0 || kept >= n)
    throw DataError(strata::detail::message("fit: validation_split ", options.validation_split, " of ", n, " samples leaves ",
                                            kept >= n ? "no sample to validate" : "no sample to train",
                                            "; give a fraction that sets apart between 1 and ", n - 1, " samples"));
  SplitTraining out{train.take(kept), options};
  out.options.validation.emplace(train.skip(kept));
  out.options.validation_split = 0.0;
  return out;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// What the callbacks learn at on_train_begin (`batches_per_pass`: the input's).
[[nodiscard]] inline TrainBegin train_begin_info(FitOptions const& options, std::int64_t batches_per_pass,
                                                 int num_replicas, int accumulation_steps, int worker, int workers) {
  return {options.epochs,
          strategy::steps_in_epoch(options.steps_per_epoch, batches_per_pass),
          options.batch_size,
          num_replicas,
          accumulation_steps,
          worker,
          workers,
          options.validation ? options.validation_freq : 0};
}

template <class Model, class LossFn>
void check_dataset(LossFn const& loss, data::Dataset const& data, char const* what) {
  if (data.empty()) throw DataError(strata::detail::message(what, " is empty; give it at least one sample"));
  Model::check_input_width(data.feature_width());
  loss.validate(data.targets(), Model::output_width);
}

// Running means of the epoch so far.
template <class LossFn>
void report_running_means(Tally const& tally, BatchLogs& logs) {
  if (tally.samples == 0) return;
  logs.loss = tally.loss_sum / double(tally.samples);
  if constexpr (LossFn::reports_accuracy) logs.accuracy = double(tally.correct) / double(tally.samples);
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class Config>
class BasicTrainer {
  // One step runner and one evaluator for every device: their parts are chosen by the
  // device tag (strata/cuda.hpp brings the Cuda ones).
  template <class Model, class Opt, class LossFn, class Probe = profile::NoProbe>
  using RunnerFor = StepRunner<Config, Model, Opt, LossFn, gradient_sync_t<Config>, Probe>;
  template <class Model>
  using EvaluatorFor = Evaluator<Config, Model>;

 public:
  using config = Config;
  using strategy_type = strategy::BasicStrategy<Config>;
  static constexpr int num_replicas = Config::num_replicas;

  explicit BasicTrainer(strategy::StrategyOptions const& options = {}) : strategy_(options) {}

  // Replicas in sync across the whole job: this process's times the processes.
  [[nodiscard]] int num_replicas_in_sync() const { return strategy_.num_replicas_in_sync(); }
  [[nodiscard]] strategy_type& strategy() { return strategy_; }

  template <class Model, optim::Optimizer Opt, nn::Loss LossFn, class... Cs>
  History fit(Model& model, Opt const& optimizer, LossFn const& loss, data::Dataset const& train,
              FitOptions const& options, Cs&&... callbacks) {
    check_fit_options(options);
    check_dataset<Model>(loss, train, "fit: the training dataset");
    SplitTraining const split = split_validation(train, options);
    strategy::SharedInput const input(split.train, options.batch_size, options.shuffle, options.seed, options.prefetch);
    return fit_from(model, optimizer, loss, input, split.options, std::forward<Cs>(callbacks)...);
  }

  // Each worker trains on the data input.make(InputContext) returns for it, in local batches
  // of batch_size / workers (strategy/worker_input.hpp: distribute_datasets_from_function,
  // AutoShard::file and AutoShard::off). Every worker's dataset must hold a sample.
  template <class Model, optim::Optimizer Opt, nn::Loss LossFn, class Make, class... Cs>
  History fit(Model& model, Opt const& optimizer, LossFn const& loss, strategy::PerWorker<Make> const& input,
              FitOptions const& options, Cs&&... callbacks) {
    check_fit_options(options);
    if (options.validation_split > 0.0)
      throw ConfigError(strata::detail::message("fit: validation_split ", options.validation_split,
                                                " needs one training Dataset to split; with per-worker input give "
                                                "FitOptions::validation"));
    auto const worker_input = strategy_.worker_input(
        "fit", input.make, [&](data::Dataset const& local) { check_dataset<Model>(loss, local, "fit: this worker's dataset"); },
        options.batch_size, options.shuffle, options.seed, options.prefetch);
    return fit_from(model, optimizer, loss, worker_input, options, std::forward<Cs>(callbacks)...);
  }

  // Mean loss (and accuracy for classification) over `data`, distributed over the replicas.
  // Profiling callbacks (Profiler, TraceWriter: those with on_profile) time its batches.
  template <class Model, nn::Loss LossFn, class... Cs>
  Evaluation evaluate(Model const& model, LossFn const& loss, data::Dataset const& data, int batch_size = 256,
                      Cs&&... callbacks) {
    check_dataset<Model>(loss, data, "evaluate: the dataset");
    return infer("evaluate", model, batch_size, data, [&](auto& evaluator) { return evaluator.evaluate(loss, data); },
                 callbacks...);
  }

  // The model's outputs, output_width x data.size(), in dataset order. Profiling callbacks
  // as in evaluate.
  template <class Model, class... Cs>
  Matrix predict(Model const& model, data::Dataset const& data, int batch_size = 256, Cs&&... callbacks) {
    if (data.empty()) throw DataError("predict: the dataset is empty");
    return infer("predict", model, batch_size, data, [&](auto& evaluator) { return evaluator.predict(data); },
                 callbacks...);
  }

 private:
  // The training loop, on the global batches every worker shards or on each worker's own.
  template <class Model, optim::Optimizer Opt, nn::Loss LossFn, class Input, class... Cs>
  History fit_from(Model& model, Opt const& optimizer, LossFn const& loss, Input const& input, FitOptions const& options,
                   Cs&&... callbacks) {
    detail::Callbacks<std::remove_cvref_t<Cs>...> const hooks;
    if (options.validation) check_dataset<Model>(loss, *options.validation, "fit: the validation dataset");
    // Profiling callbacks turn the probe on; otherwise it is NoProbe, which reads no clock.
    // Spans outlive their step only for a callback that reads the whole run (on_profile).
    constexpr bool profiled = (profile::ProfilingCallback<std::remove_cvref_t<Cs>> || ...);
    constexpr bool keeps_spans = (profile::RunProfilingCallback<std::remove_cvref_t<Cs>> || ...);
    using Probe = std::conditional_t<profiled, profile::Probe<num_replicas>, profile::NoProbe>;
    using Runner = RunnerFor<Model, Opt, LossFn, Probe>;
    Runner runner(strategy_, model, optimizer, loss, options.batch_size, options.seed, {options.clip_global_norm});
    Probe& probe = runner.probe();
    // Validation runs on the runner's own passes and weights (RunnerReplicas): no memory of its own.
    std::optional<Evaluator<Config, Model, profile::NoProbe, RunnerReplicas<Runner>>> validator;
    if (options.validation) validator.emplace(strategy_, model, options.batch_size, RunnerReplicas<Runner>(runner));

    // What checkpoint callbacks save, and what BackupAndRestore loads into before training starts.
    io::TrainingState state = io::training_state(model, runner.optimizer(), runner.optimizer_state());
    state.config = Config::describe();
    state.progress.seed = options.seed;
    state.progress.batch_size = options.batch_size;
    state.progress.loss_scale = runner.loss_scale();
    state.progress.steps_per_epoch = options.steps_per_epoch;
    TrainBegin const begin = train_begin_info(options, input.batches_per_pass(), num_replicas_in_sync(),
                                              Config::accumulation_steps, strategy_.processes().process(),
                                              strategy_.processes().processes());
    strategy_.agree([&] {
      hooks.train_begin(begin, state, callbacks...);
      return false;
    });
    io::Progress const start = state.progress;  // a restored run continues exactly here
    strategy_.agree([&] {
      check_same_start(start);
      return false;
    });
    runner.resume(start.step, start.micro_batches, start.loss_scale);
    History history = History::from_map(start.history);
    profile::RunProfile run;  // profiled: this process's spans so far
    if constexpr (profiled) probe.start(profile::Clock::now(), strategy_.processes().process());  // after a collective

    bool stop = false;
    for (int epoch = int(start.epoch); epoch < options.epochs && !stop; ++epoch) {
      bool const resumed = epoch == start.epoch;
      hooks.epoch_begin(epoch, callbacks...);
      auto const started = std::chrono::steady_clock::now();
      // Two batches held at once: the runner is handed the next one too (a device copies it
      // while this one computes).
      strategy::EpochStream stream(input, options.steps_per_epoch, epoch, resumed ? start.batch : 0);
      // This process's shards of the epoch so far, and the whole job's (what the logs show
      // and the state saves). A restored run's saved figures are the job's: the chief alone
      // continues from them, so that they count once whatever the number of workers now.
      Tally epoch_tally;
      if (resumed && strategy_.processes().is_chief())
        epoch_tally = {start.epoch_loss_sum, start.epoch_correct, start.epoch_samples};
      Tally job_tally = job_total(strategy_.processes(), epoch_tally);
      BatchLogs logs{epoch, options.epochs, resumed ? start.batch : 0, stream.batches(), 0.0, std::nullopt, 0.0};
      report_running_means<LossFn>(job_tally, logs);
      auto fetch_begin = probe.now();
      for (strategy::StepBatch const *step = stream.next(), *next = nullptr; step; step = next) {
        probe.set_step(runner.micro_batches());
        next = stream.next();
        auto const step_begin = probe.now();
        probe.record(-1, profile::Phase::data_wait, fetch_begin, step_begin);
        epoch_tally += runner.train_on_batch(*step->batch, next ? next->batch : nullptr, step->part);
        probe.record(-1, profile::Phase::step, step_begin, probe.now());
        job_tally = job_total(strategy_.processes(), epoch_tally);
        logs.step = step->batch->index + 1;
        report_running_means<LossFn>(job_tally, logs);
        logs.seconds = seconds_since(started);
        record(state, runner, epoch, logs.step, job_tally);
        if constexpr ((reads_state_on_batch_end<std::remove_cvref_t<Cs>> || ...)) runner.sync_to_host();
        if constexpr (profiled)
          profile_step<keeps_spans>(runner, run, epoch, options.profile_steps, start.micro_batches, hooks, callbacks...);
        auto const callbacks_begin = probe.now();
        bool const stopping = strategy_.agree([&] { return hooks.batch_end(logs, state, callbacks...); });
        probe.record(-1, profile::Phase::callbacks, callbacks_begin, probe.now());
        fetch_begin = probe.now();
        if (stopping) {
          stop = true;
          break;
        }
      }
      runner.flush();
      runner.sync_to_host();  // validation and the epoch's callbacks read the host weights
      EpochLogs epoch_logs{epoch, options.epochs, logs.step, 0.0, logs.loss, logs.accuracy, std::nullopt, std::nullopt};
      if (validator && validates_after(epoch, options.validation_freq)) {
        auto const validation_begin = probe.now();
        Evaluation const v = validator->evaluate(loss, *options.validation);
        probe.record(-1, profile::Phase::validation, validation_begin, probe.now());
        epoch_logs.val_loss = v.loss;
        epoch_logs.val_accuracy = v.accuracy;
      }
      epoch_logs.seconds = seconds_since(started);
      history.append(epoch_logs);
      record(state, runner, epoch + 1, 0, Tally{});
      state.progress.history = history.to_map();
      stop |= strategy_.agree([&] { return hooks.epoch_end(epoch_logs, state, callbacks...); });
    }
    if constexpr (keeps_spans)
      profile_run(runner, run, options.profile_steps, start.micro_batches, hooks, callbacks...);
    strategy_.agree([&] {
      hooks.train_end(history, state, callbacks...);
      return false;
    });
    return history;
  }

  // Runs `work` on an evaluator of `model`: a plain one, or, under profiling callbacks, one
  // whose probe times every batch; its spans then go to the callbacks (collective).
  template <class Model, class Work, class... Cs>
  auto infer(char const* activity, Model const& model, int batch_size, data::Dataset const& data, Work&& work,
             Cs&... callbacks) -> decltype(work(std::declval<EvaluatorFor<Model>&>())) {
    static_assert((profile::RunProfilingCallback<std::remove_cvref_t<Cs>> && ...),
                  "evaluate and predict take profiling callbacks only (those with on_profile: strata::Profiler, "
                  "strata::TraceWriter); pass the others to fit");
    if constexpr (sizeof...(Cs) == 0) {
      EvaluatorFor<Model> evaluator(strategy_, model, batch_size);
      return work(evaluator);
    } else {
      Evaluator<Config, Model, profile::Probe<num_replicas>> evaluator(strategy_, model, batch_size);
      strategy_.agree([] { return false; });  // the workers start their clocks together
      evaluator.probe().start(profile::Clock::now(), strategy_.processes().process());
      auto result = work(evaluator);
      profile::RunProfile run;
      run.activity = activity;
      evaluator.probe().drain(run.spans);
      run.set_steps((std::int64_t(data.size()) + batch_size - 1) / batch_size);
      finish_profile(run, evaluator.memory(), detail::Callbacks<std::remove_cvref_t<Cs>...>{}, callbacks...);
      return result;
    }
  }

  // After a profiled step: its spans to the profiling callbacks, with the memory, learning
  // rate and loss scale of this moment; then the spans are kept for the run's end if a
  // callback reads it and they are in the window. `origin`: the fit's first micro-batch.
  template <bool KeepsSpans, class Runner, class Hooks, class... Cs>
  void profile_step(Runner& runner, profile::RunProfile& run, int epoch, profile::StepWindow window,
                    std::int64_t origin, Hooks const& hooks, Cs&... callbacks) {
    std::size_t const first = run.spans.size();
    runner.probe().drain(run.spans);
    profile::StepProfile step{epoch,
                              runner.micro_batches(),
                              std::span<profile::Span const>(run.spans).subspan(first),
                              runner.memory(),
                              optim::learning_rate(runner.optimizer(), runner.optimizer_steps()),
                              std::nullopt,
                              num_replicas_in_sync()};
    if (auto const scale = runner.loss_scale()) step.loss_scale = scale->scale;
    profile::read_process_memory(step.memory);
    hooks.step_profile(step, callbacks...);
    if constexpr (KeepsSpans) profile::keep_window(run.spans, first, window, origin);
    else run.spans.resize(first);
  }

  // At the end of a profiled fit: every worker's spans and memory, merged, to the profiling
  // callbacks on every worker (collective).
  template <class Runner, class Hooks, class... Cs>
  void profile_run(Runner& runner, profile::RunProfile& run, profile::StepWindow window, std::int64_t origin,
                   Hooks const& hooks, Cs&... callbacks) {
    std::size_t const first = run.spans.size();
    runner.probe().drain(run.spans);
    profile::keep_window(run.spans, first, window, origin);
    run.set_steps(runner.micro_batches() - origin, window);
    finish_profile(run, runner.memory(), hooks, callbacks...);
  }

  // Every worker's spans and memory, merged, to the profiling callbacks on every worker
  // (collective): the end of a profiled fit, evaluate or predict.
  template <class Hooks, class... Cs>
  void finish_profile(profile::RunProfile& run, profile::Memory const& memory, Hooks const& hooks, Cs&... callbacks) {
    profile::gather_run(run, strategy_, memory);
    strategy_.agree([&] {
      hooks.profile(run, callbacks...);
      return false;
    });
  }

  // Every process must continue from where the chief does (the chief's weights and state
  // are broadcast; the position in the data cannot be).
  void check_same_start(io::Progress const& start) {
    auto& processes = strategy_.processes();
    if (processes.processes() == 1) return;
    auto const where = [](io::Progress const& p) {
      return strata::detail::message("step ", p.step, " (epoch ", p.epoch, ", batch ", p.batch, ")");
    };
    std::string chief = where(start);
    processes.broadcast(chief, 0);
    if (chief != where(start))
      throw ConfigError(strata::detail::message(
          "fit: process ", processes.process(), " starts at ", where(start), " but the chief starts at ", chief,
          "; every worker must restore the same backup: put BackupAndRestore's directory on a filesystem every "
          "worker reads (or give each worker a copy of the chief's)"));
  }

  template <class C>
  static constexpr bool reads_state_on_batch_end =
      requires(C& c, io::TrainingState& s) { c.on_batch_end(BatchLogs{}, s); };

  // Where training stands, for the callbacks that save it.
  template <class Runner>
  static void record(io::TrainingState& state, Runner const& runner, std::int64_t epoch, std::int64_t batch,
                     Tally const& tally) {
    io::Progress& p = state.progress;
    p.step = runner.optimizer_steps();
    p.micro_batches = runner.micro_batches();
    p.epoch = epoch;
    p.batch = batch;
    p.epoch_loss_sum = tally.loss_sum;
    p.epoch_correct = tally.correct;
    p.epoch_samples = tally.samples;
    p.loss_scale = runner.loss_scale();
    state.at_step_boundary = runner.at_step_boundary();
  }

  strategy_type strategy_;
};

}  // namespace strata::train
