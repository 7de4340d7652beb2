#pragma once
// A ParameterServer job of separate processes, each started on its own with its role in
// TF_CONFIG (ps/cluster_spec.hpp), talking over ZeroMQ on tcp://:
//
//   run_server(spec, ...)   a "ps" task: holds its shards and applies pushes until the chief
//                           says stop
//   run_worker(spec, ...)   a "worker" task: tells the chief it is ready, trains each step the
//                           chief sends it (pull, compute, push) and reports back, until stop
//   run_chief(spec, ...)    the "chief": the coordinator. It hands the steps of every epoch to
//                           idle workers in order (the staleness bound gates them as
//                           ps::Coordinator does), evaluates the servers' weights after each
//                           epoch, and stops every process at the end
//   run_evaluator(spec, ...) an "evaluator" task: a SidecarEvaluator on the chief's
//                           checkpoint (JobOptions::checkpoint), evaluating each epoch's
//                           weights while the job trains the next, until the last epoch's
//
// Every process builds the same model from the same seed (the servers start from its
// weights) and reads the same data: step k is batch k mod (batches per epoch) of epoch
// k / (batches per epoch), in the order fit would shuffle it.
//
// Faults. A worker that does not report a step within `step_timeout` (killed, stalled, or
// its machine gone) is dropped and its step handed to another worker; a worker started
// again says it is ready and is given steps again. Servers apply each step at most once,
// so a step re-run after its first worker pushed part of it is not applied twice. A server
// that stops answering is a CommError on the workers (after `server_timeout`), which they
// report to the chief, which stops the job with that error: the job's state is on the
// servers, and a lost shard cannot be recomputed.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "strata/core/error.hpp"
#include "strata/data/dataset.hpp"
#include "strata/io/checkpoint.hpp"
#include "strata/ps/cluster_spec.hpp"
#include "strata/ps/message.hpp"
#include "strata/ps/partition.hpp"
#include "strata/ps/shard_server.hpp"
#include "strata/ps/worker.hpp"
#include "strata/strategy/epoch_input.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/sidecar_evaluator.hpp"
#include "strata/train/trainer.hpp"

namespace strata::ps {

struct JobOptions {
  int epochs = 1;
  int batch_size = 32;  // each step's batch, trained by one worker
  bool shuffle = true;
  std::uint64_t seed = 0;
  int staleness = 0;  // S, as ps::CoordinatorOptions and ps::ShardServer
  // K, as GradAccum<K>: each step is K consecutive batches (fewer at an epoch's end) that
  // one worker trains whole, with one push. Every process must be given the same.
  int accumulation_steps = 1;
  // > 0: an epoch is this many batches of pass after pass over the data, each reshuffled
  // (FitOptions::steps_per_epoch); 0: one pass. Every process must be given the same.
  std::int64_t steps_per_epoch = 0;
  int validation_freq = 1;  // the chief validates after every this-many-th epoch (FitOptions::validation_freq)
  float clip_global_norm = 0.0f;
  PartitionOptions partition{};
  std::chrono::milliseconds step_timeout{30'000};    // chief: a worker silent this long on a step is lost
  std::chrono::milliseconds server_timeout{10'000};  // workers, chief: a server silent this long is lost
  std::chrono::milliseconds idle_timeout{120'000};   // chief with no live worker, worker with no word from the chief,
                                                     // evaluator with no new checkpoint (longer than an epoch)
  // Where the chief writes a checkpoint of every server's shards and optimizer state after
  // each epoch (atomically); when the file exists at start, the chief and the servers
  // continue from it. Empty: no checkpoints. Every process must be able to read it.
  std::filesystem::path checkpoint{};
};

// What a worker reports with a finished step (sent as 8 floats' worth of bytes).
struct StepReport {
  double loss_sum = 0, correct = 0, samples = 0, attempts = 0;
};
static_assert(sizeof(StepReport) == 8 * sizeof(float));

namespace detail {

// What evaluates the job's weights, on the chief or in the evaluator task: one process, in
// the workers' compute type.
template <class Compute>
using JobEvaluation = train::BasicTrainer<policy::Config<policy::OneDevice, policy::Precision<Compute>>>;

inline Header job_header(std::uint64_t job, Kind kind, std::int64_t step = -1, int sender = -1) {
  Header h;
  h.kind = kind;
  h.job = job;
  h.step = step;
  h.sender = sender;
  return h;
}

// The batches every process numbers the same way (as fit's, pass by pass).
inline strategy::SharedInput job_input(data::Dataset const& train, JobOptions const& options) {
  if (options.batch_size < 1)
    throw ConfigError(strata::detail::message("ps job: batch_size ", options.batch_size, " must be at least 1"));
  if (options.accumulation_steps < 1)
    throw ConfigError(strata::detail::message("ps job: accumulation_steps ", options.accumulation_steps,
                                              " must be at least 1 (1: a step per batch)"));
  if (options.steps_per_epoch < 0)
    throw ConfigError(strata::detail::message("ps job: steps_per_epoch ", options.steps_per_epoch,
                                              " must be >= 0 (0: an epoch is one pass over the data)"));
  if (train.empty()) throw DataError("ps job: the training dataset is empty; give it at least one sample");
  return {train, options.batch_size, options.shuffle, options.seed, /*prefetch=*/0};
}

// Steps (server updates) in an epoch of `batches` batches: groups of K, the last maybe partial.
inline std::int64_t job_steps_per_epoch(std::int64_t batches, JobOptions const& options) {
  return (batches + options.accumulation_steps - 1) / options.accumulation_steps;
}

// The checkpoint at options.checkpoint, when there is one: `model` and `state` hold its
// weights and optimizer state, and its progress is returned. It must be of this run's
// batch size, seed and accumulation (the step numbers and batches depend on them);
// `steps_per_epoch`: this run's, where the caller reads the data (not a server).
template <class Model, optim::Optimizer Opt>
std::optional<io::Progress> load_job_checkpoint(JobOptions const& options, std::optional<std::int64_t> steps_per_epoch,
                                                Model& model, Opt const& optimizer, typename Opt::State& state) {
  if (options.checkpoint.empty() || !std::filesystem::exists(options.checkpoint)) return std::nullopt;
  io::TrainingState s = io::training_state(model, optimizer, state);
  io::load_checkpoint(options.checkpoint, s, [&](io::Progress const& p) {
    if (p.batch_size != options.batch_size || p.seed != options.seed || p.steps_per_epoch != options.steps_per_epoch)
      throw ConfigError(strata::detail::message(
          options.checkpoint.string(), ": written by a job of batch size ", p.batch_size, ", seed ", p.seed,
          " and steps_per_epoch ", p.steps_per_epoch, ", but this job has ", options.batch_size, ", ", options.seed,
          " and ", options.steps_per_epoch, "; run with those, or remove the checkpoint to start afresh"));
    if (steps_per_epoch && p.step != p.epoch * *steps_per_epoch)
      throw ConfigError(strata::detail::message(
          options.checkpoint.string(), ": holds ", p.step, " steps after ", p.epoch, " epochs, but an epoch of this job "
          "is ", *steps_per_epoch, " steps (accumulation_steps ", options.accumulation_steps,
          "); run with the accumulation_steps that wrote it, or remove the checkpoint to start afresh"));
  });
  return s.progress;
}

}  // namespace detail

// A "ps" task: serves its shards on its address until the chief's stop.
template <class Model, optim::Optimizer Opt>
void run_server(ClusterSpec const& spec, Model const& initial, Opt const& optimizer, JobOptions const& options) {
  if (spec.role != Role::ps) throw ConfigError(strata::detail::message("ps::run_server: this task is ", name(spec.role)));
  Partition const partition(Model::parameter_tensors(), int(spec.servers.size()), options.partition);
  ShardServer<Opt> server(partition, spec.index, Model::parameter_tensors(), initial.parameters(), optimizer,
                          options.staleness);
  Model restored = initial;
  auto state = optimizer.make_state(restored.parameters().size());
  // A server does not read the data, so the chief checks the checkpoint's step count.
  if (auto const progress = detail::load_job_checkpoint(options, std::nullopt, restored, optimizer, state))
    server.restore(restored.parameters(), state, progress->step);
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.set(zmq::sockopt::linger, 0);
  listen_on(socket, ClusterSpec::bind_address(spec.own_address()), "server");
  std::atomic<bool> const never{false};
  server.serve(socket, never);  // returns on stop
}

// A "worker" task: trains the steps the chief sends until the chief's stop. Compute: the
// type it computes in (bf16: MixedPrecision; ps::Worker), the chief's too; Wire: what its
// gradients cross in (bf16/fp16: Compress<T>; the servers take either).
template <class Compute = float, class Wire = float, class Model, nn::Loss LossFn>
void run_worker(ClusterSpec const& spec, Model const& initial, LossFn const& loss, data::Dataset const& train,
                JobOptions const& options) {
  if (spec.role != Role::worker) throw ConfigError(strata::detail::message("ps::run_worker: this task is ", name(spec.role)));
  Partition const partition(Model::parameter_tensors(), int(spec.servers.size()), options.partition);
  std::uint64_t const job = partition.fingerprint();
  auto const input = detail::job_input(train, options);
  std::int64_t const per_epoch = strategy::steps_in_epoch(options.steps_per_epoch, input.batches_per_pass());
  std::int64_t const steps_per_epoch = detail::job_steps_per_epoch(per_epoch, options);
  int const k = options.accumulation_steps;
  zmq::context_t context(1);
  Worker<Model, LossFn, Compute, Wire> worker(context, spec.server_addresses(), partition, initial, loss, options.batch_size,
                                        spec.index, {options.server_timeout, options.clip_global_norm, options.seed});
  zmq::socket_t chief(context, zmq::socket_type::dealer);
  chief.set(zmq::sockopt::linger, 1000);  // let the last report leave
  connect_to(chief, ClusterSpec::connect_address(spec.chief), "worker");
  auto send = [&](zmq::message_t m) { chief.send(m, zmq::send_flags::none); };
  send(encode(detail::job_header(job, Kind::ready, -1, spec.index), {}));
  zmq::pollitem_t item{chief.handle(), 0, ZMQ_POLLIN, 0};
  for (;;) {
    if (zmq::poll(&item, 1, options.idle_timeout) == 0)
      throw CommError(strata::detail::message("ps: worker ", spec.index, " heard nothing from the chief at ", spec.chief,
                                              " for ", options.idle_timeout.count(), " ms"));
    zmq::message_t frame;
    (void)chief.recv(frame);
    Message const message(frame, job);
    if (message.header().kind == Kind::stop) return;
    if (message.header().kind != Kind::task) continue;
    std::int64_t const step = message.header().step;
    try {
      // Step `step` is group `step % steps_per_epoch` of K batches of its epoch.
      std::int64_t const epoch = step / steps_per_epoch, first = (step % steps_per_epoch) * k;
      std::int64_t const count = std::min<std::int64_t>(k, per_epoch - first);
      strategy::EpochStream stream(input, options.steps_per_epoch, epoch, first);
      std::vector<OwnedBatch> owned;  // a stream's batch is valid until the second one after it
      for (std::int64_t m = 0; m < count; ++m) owned.emplace_back(*stream.next()->batch);
      std::vector<data::Batch> group;
      for (OwnedBatch const& b : owned) group.push_back(b.view());
      StepResult const result = worker.train_on_batches(group, step, epoch * per_epoch + first);
      train::Tally const tally = result.tally();
      StepReport const report{tally.loss_sum, double(tally.correct), double(tally.samples), double(result.attempts)};
      float floats[8];
      std::memcpy(floats, &report, sizeof report);
      send(encode(detail::job_header(job, Kind::done, step, spec.index), floats));
    } catch (std::exception const& e) {  // the chief stops the job with this worker's reason
      send(encode_error(detail::job_header(job, Kind::error, step, spec.index), e.what()));
      throw;
    }
  }
}

// The chief: runs the job's epochs on the workers that report ready, evaluates after each
// epoch (when `validation` is given and "cluster" lists no evaluator, whose work that then
// is), stops every process, and returns the History.
// `on_epoch` (optional) sees each epoch's logs as they are made; `events` (optional) each
// notable event in words ("worker 1 lost: ...", "worker 1 joined"). Compute: the workers'
// type, which the chief's evaluation computes in too.
template <class Compute = float, class Model, optim::Optimizer Opt, nn::Loss LossFn>
train::History run_chief(ClusterSpec const& spec, Model const& initial, Opt const& optimizer, LossFn const& loss,
                         data::Dataset const& train,
                         std::optional<data::Dataset> const& validation, JobOptions const& options,
                         std::function<void(train::EpochLogs const&)> const& on_epoch = {},
                         std::function<void(std::string const&)> const& events = {}, Model* trained = nullptr) {
  using Clock = std::chrono::steady_clock;
  if (spec.role != Role::chief) throw ConfigError(strata::detail::message("ps::run_chief: this task is ", name(spec.role)));
  if (!spec.evaluators.empty() && options.checkpoint.empty())
    throw ConfigError("ps::run_chief: \"cluster\" lists an evaluator, which reads the chief's checkpoints, and "
                      "JobOptions::checkpoint is empty; give every process of the job the same checkpoint file "
                      "(--checkpoint FILE)");
  if (options.epochs < 1) throw ConfigError(strata::detail::message("ps job: epochs ", options.epochs, " must be at least 1"));
  if (options.staleness < 0)
    throw ConfigError(strata::detail::message("ps job: staleness ", options.staleness, " must be >= 0 (0: synchronous)"));
  Partition const partition(Model::parameter_tensors(), int(spec.servers.size()), options.partition);
  std::uint64_t const job = partition.fingerprint();
  if (options.validation_freq < 1)
    throw ConfigError(strata::detail::message("ps job: validation_freq ", options.validation_freq,
                                              " must be >= 1 (1: validate after every epoch)"));
  std::int64_t const per_epoch =
      strategy::steps_in_epoch(options.steps_per_epoch, detail::job_input(train, options).batches_per_pass());
  std::int64_t const steps_per_epoch = detail::job_steps_per_epoch(per_epoch, options);
  auto say = [&](std::string const& what) {
    if (events) events(what);
  };

  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.set(zmq::sockopt::linger, 1000);
  listen_on(socket, ClusterSpec::bind_address(spec.chief), "chief");
  // The chief's own view of the servers: pulls the weights to evaluate them.
  Worker<Model, LossFn> reader(context, spec.server_addresses(), partition, initial, loss, 1, -1,
                               {options.server_timeout});

  struct Peer {
    int index = -1;
    std::int64_t step = -1;  // the step it is training, or -1: idle
    Clock::time_point deadline{};
  };
  std::map<std::string, Peer> peers;  // by ZeroMQ identity; a worker started again is a new peer
  auto send_to = [&](std::string const& identity, zmq::message_t m) {
    socket.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    socket.send(m, zmq::send_flags::none);
  };
  auto stop_everyone = [&] {
    for (auto const& [identity, peer] : peers) send_to(identity, encode(detail::job_header(job, Kind::stop), {}));
    for (int s = 0; s < int(spec.servers.size()); ++s) {
      try {
        reader.ask(s, Kind::stop, Kind::applied);
      } catch (CommError const&) {  // a server already gone has nothing to stop
      }
    }
  };

  // Continue from the checkpoint, where there is one (the servers load it too).
  train::History history;
  Model evaluated = initial;
  auto state = optimizer.make_state(evaluated.parameters().size());
  int first_epoch = 0;
  if (auto const progress = detail::load_job_checkpoint(options, steps_per_epoch, evaluated, optimizer, state)) {
    first_epoch = int(progress->epoch);
    history = train::History::from_map(progress->history);
    say(strata::detail::message("resumed from ", options.checkpoint.string(), " after epoch ", first_epoch, " (step ",
                                progress->step, ")"));
  }
  // Every server's weights and optimizer state, into one checkpoint.
  auto save = [&](int epochs_done) {
    std::size_t const slots = [&] {
      std::size_t n = 0;
      state.for_each_slot([&](char const*, AlignedBuffer&) { ++n; });
      return n;
    }();
    for (int s = 0; s < int(spec.servers.size()); ++s) {
      zmq::message_t const frame = reader.ask(s, Kind::snapshot, Kind::weights);
      Message const m(frame, job);
      std::size_t const floats = partition.floats(s);
      if (m.floats() != floats * (1 + slots))
        throw CommError(strata::detail::message("ps: server ", s, " answered the snapshot with ", m.floats(),
                                                " floats, not ", floats * (1 + slots)));
      auto const shards = partition.of(s);
      std::byte const* at = unpack(shards, m.payload(), evaluated.parameters());
      state.for_each_slot([&](char const*, AlignedBuffer& slot) { at = unpack(shards, at, slot.span()); });
    }
    io::Progress progress;
    progress.step = std::int64_t(epochs_done) * steps_per_epoch;
    progress.epoch = epochs_done;
    progress.micro_batches = std::int64_t(epochs_done) * per_epoch;
    progress.seed = options.seed;
    progress.batch_size = options.batch_size;
    progress.steps_per_epoch = options.steps_per_epoch;
    progress.history = history.to_map();
    io::save_checkpoint(options.checkpoint, evaluated, optimizer, state, progress);
  };
  try {
    Clock::time_point last_alive = Clock::now();
    for (int epoch = first_epoch; epoch < options.epochs; ++epoch) {
      auto const start = Clock::now();
      std::int64_t const first = epoch * steps_per_epoch, end = first + steps_per_epoch;
      std::deque<std::int64_t> pending;
      for (std::int64_t k = first; k < end; ++k) pending.push_back(k);
      std::vector<char> done(std::size_t(steps_per_epoch), 0);
      std::int64_t done_prefix = first, finished = 0;
      train::Tally total;
      while (finished < steps_per_epoch) {
        // Hand the next steps to idle workers, as far as the staleness bound lets them start.
        for (auto& [identity, peer] : peers) {
          if (peer.step >= 0 || pending.empty() || pending.front() - options.staleness > done_prefix) continue;
          peer.step = pending.front();
          pending.pop_front();
          peer.deadline = Clock::now() + options.step_timeout;
          send_to(identity, encode(detail::job_header(job, Kind::task, peer.step), {}));
        }
        zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, std::chrono::milliseconds(50)) > 0) {
          zmq::message_t identity_frame, frame;
          (void)socket.recv(identity_frame);
          if (!identity_frame.more()) continue;
          (void)socket.recv(frame);
          std::string const identity = identity_frame.to_string();
          std::optional<Message> message;
          try {
            message.emplace(frame, job);
          } catch (CommError const& e) {
            say(strata::detail::message("ignored a message: ", e.what()));
            continue;
          }
          Header const& h = message->header();
          auto it = peers.find(identity);
          if (h.kind == Kind::ready) {
            if (it == peers.end()) say(strata::detail::message("worker ", h.sender, " joined"));
            peers[identity] = Peer{h.sender};
          } else if (h.kind == Kind::done) {
            if (it == peers.end()) {  // given up for lost, but only slow: it may take steps again
              say(strata::detail::message("worker ", h.sender, " is back"));
              it = peers.emplace(identity, Peer{h.sender}).first;
            }
            if (it->second.step == h.step) it->second.step = -1;
            std::int64_t const k = h.step;
            if (k >= first && k < end && !done[std::size_t(k - first)]) {  // a re-run step reports once
              done[std::size_t(k - first)] = 1;
              ++finished;
              while (done_prefix < end && done[std::size_t(done_prefix - first)]) ++done_prefix;
              StepReport report;
              if (message->floats() == 8) {
                float floats[8];
                message->copy_floats(0, floats);
                std::memcpy(&report, floats, sizeof report);
              }
              total.loss_sum += report.loss_sum;
              total.correct += std::int64_t(report.correct);
              total.samples += std::int64_t(report.samples);
              std::erase(pending, k);
            }
          } else if (h.kind == Kind::error) {
            throw CommError(strata::detail::message("ps: worker ", h.sender, " failed on step ", h.step, ": ",
                                                    message->text()));
          }
          last_alive = Clock::now();
        }
        // Workers past their deadline are lost; their steps go back to the front of the queue.
        auto const now = Clock::now();
        for (auto it = peers.begin(); it != peers.end();) {
          if (it->second.step >= 0 && now > it->second.deadline) {
            std::int64_t const k = it->second.step;
            say(strata::detail::message("worker ", it->second.index, " lost: no report of step ", k, " within ",
                                        options.step_timeout.count(), " ms; step ", k, " re-scheduled"));
            if (!done[std::size_t(k - first)]) pending.push_front(k);
            it = peers.erase(it);
          } else {
            ++it;
          }
        }
        if (!peers.empty()) last_alive = now;
        if (peers.empty() && now - last_alive > options.idle_timeout)
          throw CommError(strata::detail::message("ps: no worker has been ready for ", options.idle_timeout.count(),
                                                  " ms; start the worker tasks (", spec.workers.size(), " in TF_CONFIG)"));
      }
      train::EpochLogs logs;
      logs.epoch = epoch;
      logs.epochs = options.epochs;
      logs.steps = per_epoch;
      logs.loss = total.loss_sum / double(std::max<std::int64_t>(total.samples, 1));
      if constexpr (LossFn::reports_accuracy) logs.accuracy = double(total.correct) / double(std::max<std::int64_t>(total.samples, 1));
      reader.pull();  // every step of the epoch is applied: the servers' weights after it
      evaluated = reader.model();
      if (validation && spec.evaluators.empty() && train::validates_after(epoch, options.validation_freq)) {
        auto const e = detail::JobEvaluation<Compute>{}.evaluate(evaluated, loss, *validation, 256);
        logs.val_loss = e.loss;
        logs.val_accuracy = e.accuracy;
      }
      logs.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      history.append(logs);
      if (!options.checkpoint.empty()) save(epoch + 1);
      if (on_epoch) on_epoch(logs);
    }
  } catch (...) {
    stop_everyone();
    throw;
  }
  try {
    reader.pull();  // where the servers ended
  } catch (...) {
    stop_everyone();
    throw;
  }
  evaluated = reader.model();
  for (std::size_t s = 0; s < spec.servers.size(); ++s)
    say(strata::detail::message("server ", s, " applied ", reader.versions()[s], " updates"));
  stop_everyone();
  if (trained) std::copy(evaluated.parameters().begin(), evaluated.parameters().end(), trained->parameters().begin());
  return history;
}

// An "evaluator" task: evaluates the weights of each checkpoint the chief writes (after every
// epoch, at JobOptions::checkpoint, which every process must be able to read) on
// `validation`, as the chief would, in Compute (the workers' type), while the job trains on.
// The chief skips its own evaluation when TF_CONFIG's "cluster" lists the evaluator. Like
// every sidecar it takes the newest checkpoint, so one written while it evaluated may be
// passed over. `on_evaluated` (optional) sees each one. Returns after the checkpoint of the
// job's last epoch; a CommError when none came for JobOptions::idle_timeout before it.
template <class Compute = float, class Model, nn::Loss LossFn>
train::SidecarReport run_evaluator(ClusterSpec const& spec, Model const& initial, LossFn const& loss,
                                   data::Dataset const& validation, JobOptions const& options,
                                   std::function<void(train::CheckpointEvaluation const&)> const& on_evaluated = {}) {
  if (spec.role != Role::evaluator)
    throw ConfigError(strata::detail::message("ps::run_evaluator: this task is ", name(spec.role)));
  if (options.checkpoint.empty())
    throw ConfigError("ps::run_evaluator: the evaluator reads the chief's checkpoints, and JobOptions::checkpoint is "
                      "empty; give every process of the job the same checkpoint file (--checkpoint FILE)");
  Model model = initial;
  detail::JobEvaluation<Compute> trainer;
  train::SidecarEvaluator const sidecar{.checkpoint = options.checkpoint, .until_epochs = options.epochs,
                                        .poll = std::chrono::milliseconds(100), .idle_timeout = options.idle_timeout};
  train::SidecarReport report = sidecar.run(trainer, model, loss, validation, [&](train::CheckpointEvaluation const& e) {
    if (on_evaluated) on_evaluated(e);
  });
  if (report.stopped_by == train::SidecarStop::idle_timeout)
    throw CommError(strata::detail::message(
        "ps: the evaluator saw no new checkpoint at ", options.checkpoint.string(), " for ", options.idle_timeout.count(),
        " ms before the job's epoch ", options.epochs, " (evaluated ", report.evaluations.size(),
        "); is the chief running, and is idle_timeout longer than an epoch?"));
  return report;
}

}  // namespace strata::ps
