#pragma once
// ps::LocalCluster<ParameterServer<Workers, Servers>, Model, Opt, Loss>: a whole
// ParameterServer job inside one process: `Servers` server threads, each answering on its
// own ZeroMQ inproc:// socket, `Workers` worker threads and the coordinator that schedules
// steps onto them. The messages are the ones processes exchange over tcp://, so what the
// tests check here is the protocol a multi-process job speaks.
//
// Trainer<ParameterServer<W, S>>::fit runs on one (ps/trainer.hpp). Step by step, as with
// TensorFlow's ClusterCoordinator:
//
//   strata::ps::LocalCluster<strata::ParameterServer<2, 1>, Model, strata::Adam, strata::SoftmaxCrossEntropy>
//       cluster(model, strata::Adam{.lr = 1e-3f}, {}, {.staleness = 2, .max_batch = 256});
//   auto loss = cluster.coordinator().schedule([&](auto& worker, std::int64_t step) {
//     return worker.train_on_batch(batch, step).tally().loss_sum; });
//   cluster.coordinator().join();
//   cluster.copy_weights_to(model);

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

namespace strata::ps {

struct ClusterOptions {
  int staleness = 0;     // S: a gradient may be computed on weights at most S updates old
  int max_batch = 256;   // the largest batch a worker trains on
  PartitionOptions partition{};
  WorkerOptions worker{};
  // Times the workers' steps and the servers' updates (profile/cluster_probe.hpp); it must
  // have Workers worker and Servers server buffers and outlive the cluster. nullptr: unprofiled.
  profile::ClusterProbe* probe = nullptr;
};

// Compute: the type the workers compute in (float, or bf16/fp16 under mixed precision);
// Wire: what their gradients cross in (float, or bf16/fp16 under Compress<T>).
template <class Policy, class Model, optim::Optimizer Opt, nn::Loss LossFn, class Compute = float, class Wire = float>
class LocalCluster {
  static_assert(Policy::kind == policy::StrategyKind::parameter_server,
                "strata::ps::LocalCluster<P, ...>: P must be strata::ParameterServer<Workers, Servers>");

 public:
  using worker_type = Worker<Model, LossFn, Compute, Wire>;
  static constexpr int workers = Policy::workers;
  static constexpr int servers = Policy::servers;

  // The servers start from `model`'s weights.
  LocalCluster(Model const& model, Opt const& optimizer, LossFn const& loss, ClusterOptions options = {})
      : options_(options), partition_(Model::parameter_tensors(), servers, options.partition) {
    if (options.max_batch < 1)
      throw ConfigError(strata::detail::message("ps::LocalCluster: max_batch ", options.max_batch, " must be at least 1"));
    if (options.probe && (options.probe->workers() != workers || options.probe->servers() != servers))
      throw ConfigError(strata::detail::message("ps::LocalCluster: a probe of ", options.probe->workers(), " workers and ",
                                                options.probe->servers(), " servers for a cluster of ", workers, " and ",
                                                servers));
    std::string const prefix = "inproc://strata-ps-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)) + "-";
    for (int s = 0; s < servers; ++s) {
      endpoints_.push_back(prefix + std::to_string(s));
      servers_.push_back(std::make_unique<ShardServer<Opt>>(partition_, s, Model::parameter_tensors(),
                                                            model.parameters(), optimizer, options.staleness));
      servers_.back()->attach_probe(options.probe);
      sockets_.emplace_back(context_, zmq::socket_type::router);
      sockets_.back().set(zmq::sockopt::linger, 0);
      listen_on(sockets_.back(), endpoints_.back(), "server");
    }
    std::vector<worker_type*> pointers;
    for (int w = 0; w < workers; ++w) {
      workers_.push_back(std::make_unique<worker_type>(context_, endpoints_, partition_, model, loss, options.max_batch, w,
                                                       options.worker));
      workers_.back()->attach_probe(options.probe);
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
    for (auto const& server : servers_)
      unpack(server->shards(), reinterpret_cast<std::byte const*>(server->weights().data()), model.parameters());
  }
  // The servers' weights and optimizer state, into the whole-model `weights` and `state`
  // (what a checkpoint holds), between steps.
  void gather(std::span<float> weights, typename Opt::State& state) {
    for (auto& server : servers_) server->copy_to(weights, state);
  }
  // Every server continues from a checkpoint's `weights` and `state` after `steps` steps,
  // before any step is scheduled.
  void restore(std::span<float const> weights, typename Opt::State& state, std::int64_t steps) {
    for (auto& server : servers_) server->restore(weights, state, steps);
  }

 private:
  ClusterOptions options_;
  Partition partition_;
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
