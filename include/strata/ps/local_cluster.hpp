#pragma once
// ps::LocalCluster<ParameterServer<Workers, Servers>, Model, Opt, Loss>: a whole
// ParameterServer job inside one process: `Servers` server threads, each answering on its
// own ZeroMQ inproc:// socket, `Workers` worker threads and the coordinator that schedules
// steps onto them. The messages are the ones processes exchange over tcp://, so what the
// tests check here is the protocol a multi-process job speaks.
//
//   strata::ps::LocalCluster<strata::ParameterServer<2, 1>, Model, strata::Adam, strata::SoftmaxCrossEntropy>
//       cluster(model, strata::Adam{.lr = 1e-3f}, {}, {.staleness = 2, .max_batch = 256});
//   auto history = cluster.fit(train, {.epochs = 5, .batch_size = 256, .validation = test});
//   cluster.copy_weights_to(model);
//
// Or step by step, as TensorFlow's ClusterCoordinator:
//   auto loss = cluster.coordinator().schedule([&](auto& worker, std::int64_t step) {
//     return worker.train_on_batch(batch, step).tally.loss_sum; });
//   cluster.coordinator().join();

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "strata/core/error.hpp"
#include "strata/data/dataset.hpp"
#include "strata/policy/config.hpp"
#include "strata/policy/strategy.hpp"
#include "strata/ps/coordinator.hpp"
#include "strata/ps/partition.hpp"
#include "strata/ps/shard_server.hpp"
#include "strata/ps/worker.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/trainer.hpp"

namespace strata::ps {

struct ClusterOptions {
  int staleness = 0;     // S: a gradient may be computed on weights at most S updates old
  int max_batch = 256;   // the largest batch a worker trains on
  PartitionOptions partition{};
  WorkerOptions worker{};
};

struct PsFitOptions {
  int epochs = 1;
  int batch_size = 32;                        // each step's batch, trained by one worker
  std::optional<data::Dataset> validation{};  // evaluated after every epoch on the servers' weights
  bool shuffle = true;
  std::uint64_t seed = 0;                     // shuffling (dropout: ClusterOptions::worker.seed)
};

template <class Policy, class Model, optim::Optimizer Opt, nn::Loss LossFn>
class LocalCluster {
  static_assert(Policy::kind == policy::StrategyKind::parameter_server,
                "strata::ps::LocalCluster<P, ...>: P must be strata::ParameterServer<Workers, Servers>");

 public:
  using worker_type = Worker<Model, LossFn>;
  static constexpr int workers = Policy::workers;
  static constexpr int servers = Policy::servers;

  // The servers start from `model`'s weights.
  LocalCluster(Model const& model, Opt const& optimizer, LossFn const& loss, ClusterOptions options = {})
      : options_(options), partition_(Model::parameter_tensors(), servers, options.partition), loss_(loss) {
    if (options.max_batch < 1)
      throw ConfigError(strata::detail::message("ps::LocalCluster: max_batch ", options.max_batch, " must be at least 1"));
    std::string const prefix = "inproc://strata-ps-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)) + "-";
    for (int s = 0; s < servers; ++s) {
      endpoints_.push_back(prefix + std::to_string(s));
      servers_.push_back(std::make_unique<ShardServer<Opt>>(partition_, s, Model::parameter_tensors(),
                                                            model.parameters(), optimizer, options.staleness));
      sockets_.emplace_back(context_, zmq::socket_type::router);
      sockets_.back().set(zmq::sockopt::linger, 0);
      sockets_.back().bind(endpoints_.back());
    }
    std::vector<worker_type*> pointers;
    for (int w = 0; w < workers; ++w) {
      workers_.push_back(std::make_unique<worker_type>(context_, endpoints_, partition_, model, loss, options.max_batch, w,
                                                       options.worker));
      pointers.push_back(workers_.back().get());
    }
    // Threads last: nothing after them can throw and leave them running.
    for (int s = 0; s < servers; ++s)
      threads_.emplace_back([this, s] { servers_[std::size_t(s)]->serve(sockets_[std::size_t(s)], stop_); });
    coordinator_ = std::make_unique<Coordinator<worker_type>>(pointers, CoordinatorOptions{options.staleness, 0});
  }
  LocalCluster(LocalCluster const&) = delete;
  LocalCluster& operator=(LocalCluster const&) = delete;
  ~LocalCluster() {
    coordinator_.reset();  // the worker threads first, then their sockets, then the servers
    workers_.clear();
    stop_.store(true, std::memory_order_release);
    for (auto& t : threads_) t.join();
  }

  [[nodiscard]] Coordinator<worker_type>& coordinator() { return *coordinator_; }
  [[nodiscard]] Partition const& partition() const { return partition_; }
  // Server s, for its version and counters. Read it only between steps (after join()).
  [[nodiscard]] ShardServer<Opt> const& server(int s) const { return *servers_[std::size_t(s)]; }

  // The servers' weights, gathered into `model` (between steps: after join()).
  void copy_weights_to(Model& model) const {
    for (int s = 0; s < servers; ++s) {
      auto const weights = servers_[std::size_t(s)]->weights();
      std::size_t at = 0;
      for (auto const& shard : servers_[std::size_t(s)]->shards()) {
        std::copy_n(weights.data() + at, shard.size(), model.parameters().data() + shard.begin);
        at += shard.size();
      }
    }
  }

  // Keras' fit with this strategy: every batch of an epoch is one scheduled step, trained by
  // whichever worker is free. History has loss and accuracy (over the steps as applied) and
  // val_loss and val_accuracy on the servers' weights after each epoch.
  train::History fit(data::Dataset const& train, PsFitOptions const& options) {
    if (options.epochs < 1)
      throw ConfigError(strata::detail::message("ps fit: epochs ", options.epochs, " must be at least 1"));
    if (options.batch_size < 1 || options.batch_size > options_.max_batch)
      throw ConfigError(strata::detail::message("ps fit: batch_size ", options.batch_size, " must be in 1..",
                                                options_.max_batch, " (ClusterOptions::max_batch)"));
    check_data(train, "ps fit: the training dataset");
    if (options.validation) check_data(*options.validation, "ps fit: the validation dataset");
    auto const batches = (options.shuffle ? train.shuffle(options.seed) : train).batch(options.batch_size);
    train::History history;
    Model scratch = model_for_evaluation();
    for (int epoch = 0; epoch < options.epochs; ++epoch) {
      auto const start = std::chrono::steady_clock::now();
      auto stream = batches.stream(epoch);
      std::vector<RemoteValue<StepResult>> results;
      while (data::Batch const* batch = stream->next()) {
        auto owned = std::make_shared<OwnedBatch>(*batch);  // a step may run after the stream moved on
        results.push_back(coordinator_->schedule(
            [owned](worker_type& worker, std::int64_t step) { return worker.train_on_batch(owned->view(), step); }));
      }
      coordinator_->join();
      train::Tally total;
      for (auto const& r : results) total += r.fetch().tally;
      train::EpochLogs logs;
      logs.epoch = epoch;
      logs.epochs = options.epochs;
      logs.steps = std::int64_t(results.size());
      logs.loss = total.loss_sum / double(total.samples);
      if constexpr (LossFn::reports_accuracy) logs.accuracy = double(total.correct) / double(total.samples);
      if (options.validation) {
        copy_weights_to(scratch);
        auto const e = Trainer<policy::OneDevice>{}.evaluate(scratch, loss_, *options.validation, options_.max_batch);
        logs.val_loss = e.loss;
        logs.val_accuracy = e.accuracy;
      }
      logs.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      history.append(logs);
    }
    return history;
  }

 private:
  template <class... Ps>
  using Trainer = train::BasicTrainer<policy::Config<Ps...>>;

  struct OwnedBatch {
    Matrix features, targets;
    int size;
    std::int64_t index;
    explicit OwnedBatch(data::Batch const& b)
        : features(detail::eigen(b.features)), targets(detail::eigen(b.targets)), size(b.size), index(b.index) {}
    [[nodiscard]] data::Batch view() const { return {strata::view(features), strata::view(targets), size, index}; }
  };

  Model model_for_evaluation() const { return workers_.front()->model(); }
  void check_data(data::Dataset const& data, char const* what) const {
    if (data.empty()) throw DataError(strata::detail::message(what, " is empty; give it at least one sample"));
    Model::check_input_width(data.feature_width());
    loss_.validate(data.targets(), Model::output_width);
  }

  ClusterOptions options_;
  Partition partition_;
  LossFn loss_;
  zmq::context_t context_{1};
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<ShardServer<Opt>>> servers_;
  std::vector<zmq::socket_t> sockets_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::vector<std::unique_ptr<worker_type>> workers_;
  std::unique_ptr<Coordinator<worker_type>> coordinator_;
};

}  // namespace strata::ps
