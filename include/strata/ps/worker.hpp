#pragma once
// ps::Worker: one ParameterServer worker. A step pulls every server's shards, runs forward
// and backward on the worker's batch (the same ReplicaPass a Mirrored replica runs, in the
// trainer's compute type: under MixedPrecision it reads the pulled weights rounded to bf16,
// the copies a Mirrored replica reads, and stores its activations in bf16), scales
// the gradient to the batch mean, clips it by its global norm where asked (the worker holds
// the whole gradient, so the norm is exact), and pushes each server its part. A server that
// answers `stale` (the weights moved more than the staleness bound allows while the worker
// computed) makes the worker pull and compute again; servers that applied the step already
// ignore its repeat, so no step is applied twice anywhere.
//
// Wire: what the gradient crosses in (Compress<T>): fp32, or rounded to bf16/fp16 by the
// worker and widened again by the server before its fp32 update. Pulls are fp32.
//
// It talks to the servers over one ZeroMQ DEALER socket per server; a server that does not
// answer within the timeout is a CommError naming it and its address.

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <zmq.hpp>

#include "strata/core/dtype.hpp"
#include "strata/core/error.hpp"
#include "strata/core/random.hpp"
#include "strata/data/batch.hpp"
#include "strata/nn/loss.hpp"
#include "strata/policy/device.hpp"
#include "strata/profile/cluster_probe.hpp"
#include "strata/ps/message.hpp"
#include "strata/ps/partition.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/train/replica_pass.hpp"
#include "strata/train/slice_update.hpp"

namespace strata::ps {

struct WorkerOptions {
  std::chrono::milliseconds timeout{10'000};  // a server silent this long is lost
  float clip_global_norm = 0.0f;              // > 0: clip each step's gradient to this global L2 norm
  std::uint64_t seed = 0;                     // dropout: mixed with the step number, as fit does
  int max_attempts = 1000;                    // stale answers before the step is given up
};

// A batch a step owns: the step may run after the input stream moved past it.
struct OwnedBatch {
  Matrix features, targets;
  int size;
  std::int64_t index;
  explicit OwnedBatch(data::Batch const& b)
      : features(strata::detail::eigen(b.features)), targets(strata::detail::eigen(b.targets)), size(b.size),
        index(b.index) {}
  [[nodiscard]] data::Batch view() const { return {strata::view(features), strata::view(targets), size, index}; }
};

// What one step did on a worker.
struct StepResult {
  std::vector<train::Tally> micro;  // each micro-batch's loss and accuracy counts, in order
  int attempts = 1;                 // 1 + the times a server answered `stale`

  // Its micro-batches' together.
  [[nodiscard]] train::Tally tally() const {
    train::Tally total;
    for (auto const& t : micro) total += t;
    return total;
  }
};

// Compute: the type the worker's passes compute in (Precision<Compute, NoLossScale>).
template <class Model, nn::Loss LossFn, class Compute = float, class Wire = float>
class Worker {
  static_assert(is_compute_type<Compute>,
                "strata::ps::Worker<Model, Loss, Compute, Wire>: Compute, the workers' precision, must be float, "
                "strata::bf16 or strata::fp16");
  static_assert(is_compute_type<Wire>,
                "strata::ps::Worker<Model, Loss, Compute, Wire>: Wire, what a gradient crosses in, must be float, "
                "strata::bf16 or strata::fp16");

 public:
  Worker(zmq::context_t& context, std::vector<std::string> const& servers, Partition const& partition, Model const& model,
         LossFn const& loss, int max_batch, int index, WorkerOptions options = {})
      : model_(model), loss_(loss), pass_(max_batch, 0), weights_(model_.parameters(), 1, Model::parameter_tensors()),
        job_(partition.fingerprint()), endpoints_(servers), index_(index),
        options_(options), versions_(servers.size(), 0) {
    if (int(servers.size()) != partition.servers())
      throw ConfigError(strata::detail::message("ps::Worker: ", servers.size(), " server addresses for a partition over ",
                                                partition.servers(), " servers"));
    if (!(options.clip_global_norm >= 0.0f) || !std::isfinite(options.clip_global_norm))
      throw ConfigError(strata::detail::message("ps::Worker: clip_global_norm ", options.clip_global_norm,
                                                " must be a finite number >= 0 (0 turns clipping off)"));
    for (int s = 0; s < partition.servers(); ++s) {
      shards_.push_back(partition.of(s));
      buffers_.emplace_back(partition.floats(s));
      bytes_ += std::int64_t(partition.floats(s) * sizeof(float));
      sockets_.emplace_back(context, zmq::socket_type::dealer);
      sockets_.back().set(zmq::sockopt::linger, 0);
      connect_to(sockets_.back(), servers[std::size_t(s)], "worker");
    }
  }
  // weights_ reads model_'s parameters in place.
  Worker(Worker const&) = delete;
  Worker& operator=(Worker const&) = delete;

  // Every server's weights into this worker's model, and the versions they were at.
  void pull() {
    for (int s = 0; s < servers(); ++s) send(s, Kind::pull, -1, 0, {});
    for (int s = 0; s < servers(); ++s) {
      auto const reply = receive(s, Kind::weights);
      Message const message(reply, job_);
      if (message.header().element != Element::f32)
        throw CommError(strata::detail::message("ps: server ", s, " sent its weights as ", name(message.header().element),
                                                ", not fp32"));
      if (message.floats() != buffers_[std::size_t(s)].size())
        throw CommError(strata::detail::message("ps: server ", s, " sent ", message.floats(), " floats, not its ",
                                                buffers_[std::size_t(s)].size()));
      versions_[std::size_t(s)] = message.header().version;
      unpack(shards_[std::size_t(s)], message.payload(), model_.parameters());
    }
    weights_.refresh(0, model_.parameters().size());  // mixed precision: the rounded copies
  }

  // Step `step` on `batch` (the whole of it): pull, compute, push, again while a server
  // answers stale. Returns the loss and accuracy counts of the computation that was applied.
  StepResult train_on_batch(data::Batch const& batch, std::int64_t step) {
    return train_on_batches({&batch, 1}, step, step);
  }
  // Step `step` on the micro-batches `group` (GradAccum<K>: K batches, or fewer at an
  // epoch's end), each whole: their gradients summed, then scaled to the mean over all their
  // samples and clipped, one push. `first_micro_batch`: the first one's number in the run,
  // whose dropout stream it draws, as fit's micro-batch counter does.
  StepResult train_on_batches(std::span<data::Batch const> group, std::int64_t step, std::int64_t first_micro_batch) {
    if (group.empty())
      throw ConfigError(strata::detail::message("ps: worker ", index_, " was given step ", step, " with no batch"));
    StepResult result;
    for (;; ++result.attempts) {
      int const attempt = result.attempts - 1;
      auto const pull_begin = stamp();
      pull();
      auto const pulled = stamp();
      if (probe_) probe_->record_worker(index_, profile::Phase::pull, pull_begin, pulled, step, attempt, bytes_);
      compute(group, step, first_micro_batch, attempt, result);
      auto const push_begin = stamp();
      bool const applied = push(step);
      if (probe_)
        probe_->record_worker(index_, profile::Phase::push, push_begin, stamp(), step, attempt,
                              bytes_ / std::int64_t(sizeof(float)) * std::int64_t(sizeof(Wire)));
      if (applied) return result;
      if (result.attempts >= options_.max_attempts)
        throw CommError(strata::detail::message("ps: worker ", index_, " pushed step ", step, " ", result.attempts,
                                                " times and a server answered stale every time; raise the staleness "
                                                "bound or add servers"));
    }
  }

  [[nodiscard]] Model const& model() const { return model_; }
  [[nodiscard]] int index() const { return index_; }

  // Times every step's pull, forward, backward and push from now on (nullptr: no longer).
  // Before the worker's first step, or between steps.
  void attach_probe(profile::ClusterProbe* probe) { probe_ = probe; }

  // One request of `kind` that carries nothing (a chief's snapshot or stop) to server s, and
  // its answer, which must be of kind `expected`.
  zmq::message_t ask(int s, Kind kind, Kind expected) {
    send(s, kind, -1, 0, {});
    return receive(s, expected);
  }
  [[nodiscard]] int servers() const { return int(sockets_.size()); }
  // The version of each server's weights at the last pull.
  [[nodiscard]] std::vector<std::int64_t> const& versions() const { return versions_; }

 private:
  // Forward and backward on each whole micro-batch into the model's gradients (the first
  // writes them, the others add), scaled to the mean over their samples and clipped; their
  // tallies into `result`. The dropout seed is fit's for the same micro-batch number.
  // Profiled, each micro-batch has its forward and backward span, and the scaling and
  // clipping count as the last backward.
  void compute(std::span<data::Batch const> group, std::int64_t step, std::int64_t first_micro_batch, int attempt,
               StepResult& result) {
    // The products read the bf16 (and packed) copies of the pulled weights where there are
    // any; weights_(0) does not hold the products-only tensors then.
    [[maybe_unused]] auto const copy = train::bind_products_copy(weights_, 0);
    float* gradients = model_.gradients().data();
    result.micro.clear();
    std::int64_t samples = 0;
    for (std::size_t m = 0; m < group.size(); ++m) {
      strategy::DistributedBatch const whole(group[m], 1);
      strategy::Shard const shard = whole.shard(0);
      auto const forward_begin = stamp();
      auto forward_end = forward_begin;
      std::uint64_t const dropout_seed = mix64(options_.seed, std::uint64_t(first_micro_batch + std::int64_t(m)));
      result.micro.push_back(pass_.train(model_, weights_(0), loss_, shard, false, nullptr,
                                         {true, dropout_seed, shard.first_sample}, 1.0f, gradients, m > 0,
                                         [](std::size_t) {}, [&] { forward_end = stamp(); }));
      samples += group[m].size;
      if (m + 1 == group.size()) finish_gradient(gradients, samples);
      if (probe_) {
        probe_->record_worker(index_, profile::Phase::forward, forward_begin, forward_end, step, attempt);
        probe_->record_worker(index_, profile::Phase::backward, forward_end, stamp(), step, attempt);
      }
    }
  }

  // The summed gradient of `samples` samples, scaled to their mean and clipped.
  void finish_gradient(float* gradients, std::int64_t samples) const {
    std::size_t const n = model_.gradients().size();
    float const scale = 1.0f / float(samples);
    for (std::size_t i = 0; i < n; ++i) gradients[i] = gradients[i] * scale;
    if (options_.clip_global_norm > 0.0f) {
      double const norm = std::sqrt(train::sum_of_squares(gradients, n));
      if (norm > options_.clip_global_norm) {
        float const factor = float(options_.clip_global_norm / norm);
        for (std::size_t i = 0; i < n; ++i) gradients[i] *= factor;
      }
    }
  }

  // The probe's clock, or 0 when unprofiled (no clock is read).
  [[nodiscard]] std::int64_t stamp() const { return probe_ ? probe_->now() : 0; }

  // Each server its part of the gradient; true when every server applied the step.
  bool push(std::int64_t step) {
    std::span<float const> gradients = model_.gradients();
    for (int s = 0; s < servers(); ++s) {
      auto& buffer = buffers_[std::size_t(s)];
      if constexpr (compressed) {  // each shard rounded straight from the gradient arena
        Wire* at = buffer.data();
        for (Shard const& shard : shards_[std::size_t(s)]) {
          store(at, gradients.data() + shard.begin, shard.size());
          at += shard.size();
        }
      } else {
        pack(shards_[std::size_t(s)], gradients, buffer.data());
      }
      send(s, Kind::push, step, versions_[std::size_t(s)], std::span<Wire const>(buffer));
    }
    bool all_applied = true;
    for (int s = 0; s < servers(); ++s) {
      auto const reply = receive(s, Kind::applied, Kind::stale);
      if (Message(reply, job_).header().kind == Kind::stale) all_applied = false;
    }
    return all_applied;
  }

  template <class T = float>
  void send(int s, Kind kind, std::int64_t step, std::int64_t version, std::span<T const> numbers) {
    Header h;
    h.kind = kind;
    h.job = job_;
    h.sender = index_;
    h.server = s;
    h.step = step;
    h.version = version;
    auto message = encode<T>(h, numbers);
    handing_over(message);
    if (!sockets_[std::size_t(s)].send(message, zmq::send_flags::dontwait))
      throw CommError(strata::detail::message("ps: ", who(), " could not queue a ", name(kind), " for server ",
                                              s, " at ", endpoints_[std::size_t(s)]));
  }

  // Server s's answer, of one of the `expected` kinds; an error answer or silence past the
  // timeout is a CommError naming the server.
  template <class... Kinds>
  zmq::message_t receive(int s, Kinds... expected) {
    auto& socket = sockets_[std::size_t(s)];
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, options_.timeout) == 0)
      throw CommError(strata::detail::message("ps: server ", s, " at ", endpoints_[std::size_t(s)],
                                              " did not answer ", who(), " within ", options_.timeout.count(),
                                              " ms; is it running?"));
    zmq::message_t reply;
    (void)socket.recv(reply);
    taken_over(reply);
    Message const message(reply, job_);
    Kind const kind = message.header().kind;
    if (kind == Kind::error)
      throw CommError(strata::detail::message("ps: server ", s, " refused the request of ", who(), ": ", message.text()));
    if (((kind != expected) && ...))
      throw CommError(strata::detail::message("ps: server ", s, " answered ", name(kind), " out of turn"));
    return reply;
  }

  // Who is asking, in messages: a worker, or (index -1) the chief reading the servers.
  [[nodiscard]] std::string who() const {
    return index_ < 0 ? std::string("the chief") : strata::detail::message("worker ", index_);
  }

  Model model_;  // its parameters: the pulled weights; its gradients: this worker's
  LossFn loss_;
  train::ReplicaPass<Model, policy::Cpu, Compute> pass_;
  train::ReplicaWeights<policy::Cpu, Compute> weights_;  // what the passes read: the pulled weights, or their rounded copies
  std::uint64_t job_;
  std::vector<std::string> endpoints_;
  int index_;
  WorkerOptions options_;
  std::vector<std::int64_t> versions_;
  std::vector<std::vector<Shard>> shards_;
  static constexpr bool compressed = !std::is_same_v<Wire, float>;
  std::vector<std::vector<Wire>> buffers_;  // per server: its part of a gradient, packed (rounded to Wire)
  std::vector<zmq::socket_t> sockets_;
  std::int64_t bytes_ = 0;  // a whole model's floats: what a pull fetches and a push sends
  profile::ClusterProbe* probe_ = nullptr;
};

}  // namespace strata::ps
