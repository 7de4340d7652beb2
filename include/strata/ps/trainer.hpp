#pragma once
// Trainer<ParameterServer<Workers, Servers>>: Keras' fit, evaluate and predict for the
// asynchronous strategy, on a ps::LocalCluster of server and worker threads in this process.
//
//   strata::Trainer<strata::ParameterServer<2, 1>> trainer({.staleness = 2});
//   auto history = trainer.fit(model, strata::Adam{.lr = 1e-3f}, strata::SoftmaxCrossEntropy{}, train,
//                              {.epochs = 5, .batch_size = 64, .validation = test}, strata::ProgressBar{});
//
// Every batch of an epoch is one step (under GradAccum<K>, every group of K consecutive
// batches), scheduled on the coordinator and trained whole by whichever worker is free (so
// FitOptions::batch_size is each step's batch, not split over workers). Batch logs are
// reported in batch order as steps finish. The servers' weights and optimizer state are
// gathered into `model` and the TrainingState at every epoch end:
// that is where checkpoint callbacks save (BackupAndRestore, ModelCheckpoint) and where a
// restored run continues. Between epochs' ends the state is not at a step boundary (steps
// are in flight on the workers), so step-frequency saves wait for the epoch's end.
//
// With staleness 0 the steps run one after another, each on the weights of all before it:
// the same updates as Trainer<OneDevice> on the same batches, bit for bit. Under
// MixedPrecision the workers compute on the pulled weights rounded to bf16 and the servers
// keep fp32 weights (then: Trainer<OneDevice, MixedPrecision>'s updates); a loss scale is
// not built here.
// A Profiler or TraceWriter among the callbacks times each worker's pull, forward, backward
// and push of every attempt, each server's update and the loop's scheduling
// (profile/cluster_probe.hpp; docs/monitoring.md, "ParameterServer").
// Separate processes (TF_CONFIG roles over tcp://) run the same steps through ps/job.hpp.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/data/dataset.hpp"
#include "strata/io/training_state.hpp"
#include "strata/policy/config.hpp"
#include "strata/policy/strategy.hpp"
#include "strata/profile/cluster_probe.hpp"
#include "strata/profile/memory.hpp"
#include "strata/profile/run_profile.hpp"
#include "strata/ps/local_cluster.hpp"
#include "strata/strategy/epoch_input.hpp"
#include "strata/train/callback.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/trainer.hpp"

namespace strata::ps {

// What a ParameterServer trainer needs besides its policies.
struct TrainerOptions {
  int staleness = 0;                          // S: gradients at most S updates old are applied
  PartitionOptions partition{};
  std::chrono::milliseconds timeout{10'000};  // a server silent this long is a CommError
};

}  // namespace strata::ps

namespace strata::train {

template <class Config>
  requires(Config::strategy::kind == policy::StrategyKind::parameter_server)
class BasicTrainer<Config> {
  using Policy = typename Config::strategy;
  using Compute = typename Config::precision::compute_type;
  static_assert(std::is_same_v<typename Config::precision::loss_scale, policy::NoLossScale>,
                "strata::ParameterServer has no loss scaling yet: its workers would have to skip the same steps; "
                "use MixedPrecision (bf16, which needs none) or FullPrecision (docs/parameter_server.md)");
  static constexpr int accumulation = Config::accumulation_steps;
  static_assert(std::is_same_v<typename Config::device, policy::Cpu>,
                "strata::ParameterServer runs on strata::Cpu only for now (docs/parameter_server.md)");

 public:
  using config = Config;
  static constexpr int workers = Policy::workers;
  static constexpr int servers = Policy::servers;
  static constexpr int num_replicas = workers;

  explicit BasicTrainer(ps::TrainerOptions const& options = {}) : options_(options) {
    if (options.staleness < 0)
      throw ConfigError(strata::detail::message("Trainer<ParameterServer>: staleness ", options.staleness,
                                                " must be >= 0 (0: synchronous)"));
  }

  // Workers computing at once (asynchronously: "in sync" only under staleness 0, one at a time).
  [[nodiscard]] static constexpr int num_replicas_in_sync() { return workers; }
  [[nodiscard]] ps::TrainerOptions const& options() const { return options_; }

  template <class Model, optim::Optimizer Opt, nn::Loss LossFn, class... Cs>
  History fit(Model& model, Opt const& optimizer, LossFn const& loss, data::Dataset const& all_training,
              FitOptions const& all_options, Cs&&... callbacks) {
    detail::Callbacks<std::remove_cvref_t<Cs>...> const hooks;
    check_fit_options(all_options);
    check_dataset<Model>(loss, all_training, "fit: the training dataset");
    SplitTraining const split = split_validation(all_training, all_options);
    data::Dataset const& train = split.train;
    FitOptions const& options = split.options;
    if (options.validation) check_dataset<Model>(loss, *options.validation, "fit: the validation dataset");
    strategy::SharedInput const input(train, options.batch_size, options.shuffle, options.seed, options.prefetch);
    std::int64_t const per_epoch = strategy::steps_in_epoch(options.steps_per_epoch, input.batches_per_pass());
    // Each step, one server update, is a group of `accumulation` batches (GradAccum<K>),
    // trained by one worker.
    std::int64_t const steps_per_epoch = (per_epoch + accumulation - 1) / accumulation;

    // A callback that reads the whole run (Profiler, TraceWriter) turns the probe on: the
    // workers time their pulls, passes and pushes, the servers their updates, the loop its
    // own parts. Its spans are drained at each epoch's end, when no step is in flight.
    constexpr bool profiled = (profile::RunProfilingCallback<std::remove_cvref_t<Cs>> || ...);
    std::optional<profile::ClusterProbe> probe;
    if constexpr (profiled) probe.emplace(workers, servers);
    profile::ClusterProbe* const p = probe ? &*probe : nullptr;
    auto stamp = [p] { return p ? p->now() : 0; };
    // Records a loop span from `begin` to now; returns now, the next span's begin.
    auto mark = [p](profile::Phase phase, std::int64_t begin, std::int64_t step) -> std::int64_t {
      if (!p) return 0;
      std::int64_t const end = p->now();
      p->record_loop(phase, begin, end, step);
      return end;
    };

    ps::LocalCluster<Policy, Model, Opt, LossFn, Compute, typename Config::compression::wire_type> cluster(
        model, optimizer, loss,
        {options_.staleness, options.batch_size, options_.partition,
         {options_.timeout, options.clip_global_norm, options.seed}, p});
    auto optimizer_state = optimizer.make_state(model.parameters().size());
    io::TrainingState state = io::training_state(model, optimizer, optimizer_state);
    state.config = Config::describe();
    state.progress.seed = options.seed;
    state.progress.batch_size = options.batch_size;
    state.progress.steps_per_epoch = options.steps_per_epoch;
    hooks.train_begin(train_begin_info(options, input.batches_per_pass(), workers, 1, 0, 1), state, callbacks...);
    io::Progress const start = state.progress;  // a restored run continues from here (an epoch's end)
    // Steps are numbered epoch * steps_per_epoch + group, and a server ignores the numbers
    // below the restored count as applied: a checkpoint whose count is not its epochs' steps
    // (another GradAccum<K>, or saved mid-epoch) would make it skip steps unseen.
    if (start.step != std::int64_t(start.epoch) * steps_per_epoch || start.batch != 0)
      throw ConfigError(strata::detail::message(
          "Trainer<ParameterServer>: the restored checkpoint holds ", start.step, " optimizer steps after epoch ",
          start.epoch, " (batch ", start.batch, "), but an epoch of this run is ", steps_per_epoch, " steps (",
          per_epoch, " batches, GradAccum<", accumulation, ">); resume with the GradAccum<K> that wrote it, from a "
          "checkpoint taken at an epoch's end"));
    if (start.step > 0) cluster.restore(model.parameters(), optimizer_state, start.step);
    History history = History::from_map(start.history);
    profile::RunProfile run;  // profiled: the spans so far
    if (p) p->start(profile::Clock::now());
    // The spans recorded so far, those of steps in profile_steps kept (steps count from this fit's start).
    auto drain = [&] {
      if (!p) return;
      std::size_t const first = run.spans.size();
      p->drain(run.spans);
      profile::keep_window(run.spans, first, options.profile_steps, start.step);
    };

    std::int64_t micro_batches = start.micro_batches;  // batches trained: every scheduled one, at an epoch's end
    bool stop = false;
    for (int epoch = int(start.epoch); epoch < options.epochs && !stop; ++epoch) {
      hooks.epoch_begin(epoch, callbacks...);
      auto const started = std::chrono::steady_clock::now();
      strategy::EpochStream stream(input, options.steps_per_epoch, epoch, 0);
      std::vector<ps::RemoteValue<ps::StepResult>> results;  // one per step: a group of up to K batches
      results.reserve(std::size_t(steps_per_epoch));
      Tally tally;
      BatchLogs logs{epoch, options.epochs, 0, per_epoch, 0.0, std::nullopt, 0.0};
      state.at_step_boundary = false;  // steps are in flight: no checkpoint until the epoch's end
      // Reports the finished steps' batches in batch order; `wait`: every scheduled step's.
      std::size_t reported = 0;  // steps whose batches were reported
      auto report_done = [&](bool wait) {
        while (!stop && reported < results.size() && (wait || results[reported].ready())) {
          auto const& result = results[reported++].fetch();
          for (std::size_t m = 0; m < result.micro.size() && !stop; ++m) {
            tally += result.micro[m];
            ++logs.step;
            report_running_means<LossFn>(tally, logs);
            logs.seconds = seconds_since(started);
            stop = hooks.batch_end(logs, state, callbacks...);
          }
        }
      };
      std::int64_t step = std::int64_t(epoch) * steps_per_epoch;  // the latest step: a server update's number
      // The step's batches: K, or what is left at the epoch's end (a partial group, applied
      // as Trainer<OneDevice, GradAccum<K>> applies it, so no sample's gradient is dropped).
      auto group = std::make_shared<std::vector<ps::OwnedBatch>>();
      auto fetch_begin = stamp();
      while (!stop) {
        strategy::StepBatch const* next = stream.next();
        data::Batch const* batch = next ? next->batch : nullptr;  // its index: its step in the epoch
        if (batch) group->emplace_back(*batch);
        if (group->empty() || (batch && int(group->size()) < accumulation)) {
          if (!batch) break;
          continue;  // the group's next batch
        }
        step = std::int64_t(epoch) * steps_per_epoch + (group->front().index / accumulation);
        std::int64_t const first_micro_batch = std::int64_t(epoch) * per_epoch + group->front().index;
        micro_batches += std::int64_t(group->size());
        auto const scheduled = mark(profile::Phase::data_wait, fetch_begin, step);
        results.push_back(cluster.coordinator().schedule([group, step, first_micro_batch](auto& worker, std::int64_t) {
          std::vector<data::Batch> views;
          for (ps::OwnedBatch const& b : *group) views.push_back(b.view());
          return worker.train_on_batches(views, step, first_micro_batch);
        }));
        group = std::make_shared<std::vector<ps::OwnedBatch>>();
        auto const reported_at = mark(profile::Phase::schedule, scheduled, step);
        report_done(false);
        fetch_begin = mark(profile::Phase::callbacks, reported_at, step);
        if (!batch) break;
      }
      auto const joined = mark(profile::Phase::data_wait, fetch_begin, step);  // the stream's end
      cluster.coordinator().join();  // the epoch's last steps
      auto const all_reported = mark(profile::Phase::schedule, joined, step);
      report_done(true);
      auto const gathered = mark(profile::Phase::callbacks, all_reported, step);
      cluster.gather(model.parameters(), optimizer_state);
      mark(profile::Phase::schedule, gathered, step);
      EpochLogs epoch_logs{epoch, options.epochs, logs.step, 0.0, logs.loss, logs.accuracy, std::nullopt, std::nullopt};
      if (options.validation && validates_after(epoch, options.validation_freq)) {
        auto const validation_begin = stamp();
        Evaluation const v = evaluate(model, loss, *options.validation, options.batch_size);
        mark(profile::Phase::validation, validation_begin, step);
        epoch_logs.val_loss = v.loss;
        epoch_logs.val_accuracy = v.accuracy;
      }
      drain();  // no step is in flight
      epoch_logs.seconds = seconds_since(started);
      history.append(epoch_logs);
      io::Progress& progress = state.progress;
      progress.step = cluster.server(0).version();  // every server applied every step once
      progress.micro_batches = micro_batches;
      progress.epoch = epoch + 1;
      progress.batch = 0;
      progress.epoch_loss_sum = 0.0;
      progress.epoch_correct = progress.epoch_samples = 0;
      progress.history = history.to_map();
      state.at_step_boundary = true;
      stop |= hooks.epoch_end(epoch_logs, state, callbacks...);
    }
    if constexpr (profiled) {
      drain();
      run.set_steps(cluster.server(0).version() - start.step, options.profile_steps);
      run.local_replicas = run.world = workers;
      run.servers = servers;
      run.config = Config::describe();
      profile::Memory memory;
      profile::read_process_memory(memory);
      run.memory = {memory};
      hooks.profile(run, callbacks...);
    }
    hooks.train_end(history, state, callbacks...);
    return history;
  }

  // Evaluation and prediction read the weights in `model` (fit leaves the servers' there):
  // they run as on Mirrored<Workers> in the trainer's precision, one thread per worker,
  // profiled as there.
  template <class Model, nn::Loss LossFn, class... Cs>
  Evaluation evaluate(Model const& model, LossFn const& loss, data::Dataset const& data, int batch_size = 256,
                      Cs&&... callbacks) {
    return mirrored().evaluate(model, loss, data, batch_size, std::forward<Cs>(callbacks)...);
  }
  template <class Model, class... Cs>
  Matrix predict(Model const& model, data::Dataset const& data, int batch_size = 256, Cs&&... callbacks) {
    return mirrored().predict(model, data, batch_size, std::forward<Cs>(callbacks)...);
  }

 private:
  using Evaluating = BasicTrainer<policy::Config<policy::Mirrored<workers>, typename Config::precision>>;
  Evaluating& mirrored() {
    if (!evaluating_) evaluating_ = std::make_unique<Evaluating>();
    return *evaluating_;
  }

  ps::TrainerOptions options_;
  std::unique_ptr<Evaluating> evaluating_;
};

}  // namespace strata::train
