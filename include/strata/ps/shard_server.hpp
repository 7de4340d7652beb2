#pragma once
// ShardServer: one ParameterServer server. It holds its shards of the variables (ps::Partition)
// and their optimizer state, answers pulls with its weights and its version (the updates it
// has applied), and applies a pushed gradient with the user's optimizer when the gradient is
// fresh enough:
//
//   a push computed on weights at version v is applied when  version - v <= staleness,
//   and answered `stale` otherwise (the worker pulls again and recomputes).
//
// Each step is applied at most once: a step pushed again (a worker retried after losing an
// answer, or a re-scheduled step) is answered `applied` without touching the weights.
// handle() is the whole protocol and touches no socket; serve() runs it on a ZeroMQ ROUTER
// socket (inproc:// for threads, tcp:// for processes) until told to stop.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "strata/core/aligned_buffer.hpp"
#include "strata/core/error.hpp"
#include "strata/nn/layer.hpp"
#include "strata/optim/optimizer.hpp"
#include "strata/ps/message.hpp"
#include "strata/profile/cluster_probe.hpp"
#include "strata/ps/partition.hpp"

namespace strata::ps {

template <optim::Optimizer Opt>
class ShardServer {
  static_assert(!optim::LayerwiseOptimizer<Opt>,
                "strata::ps: a layer-wise optimizer (Lamb) needs each whole tensor's norms, which a server holding "
                "one shard of a tensor cannot see; use Adam, AdamW or Sgd with ParameterServer");

 public:
  // `initial`: the whole arena of weights (every process starts from the same, the chief's).
  ShardServer(Partition const& partition, int server, std::vector<nn::ParameterTensor> const& tensors,
              std::span<float const> initial, Opt const& optimizer, int staleness)
      : optimizer_(optimizer), shards_(partition.of(server)), job_(partition.fingerprint()), server_(server),
        staleness_(staleness) {
    optimizer_.validate();
    if (staleness < 0)
      throw ConfigError(strata::detail::message("ps: staleness ", staleness, " must be >= 0 (0: synchronous)"));
    std::size_t floats = 0;
    for (auto const& s : shards_) {
      if (s.end > initial.size())
        throw ConfigError(strata::detail::message("ps::ShardServer: shard [", s.begin, ", ", s.end, ") of server ", server,
                                                  " lies outside the ", initial.size(), "-float model"));
      bool decay = true;
      if constexpr (requires { optimizer_.decays(std::string()); }) decay = optimizer_.decays(tensors[s.tensor].name);
      decays_.push_back(decay);
      floats += s.size();
    }
    weights_ = AlignedBuffer(floats);
    state_ = optimizer_.make_state(floats);
    pack(shards_, initial, weights_.data());
  }

  // The reply to one request. Never throws for what a peer sent: a malformed or foreign
  // message gets an error reply that says what was wrong.
  zmq::message_t handle(zmq::message_t const& request) {
    Header reply = answer(Kind::error);
    auto refuse = [&](std::string const& why) {
      ++rejected_;
      return encode_error(reply, why);
    };
    try {
      Message const message(request, job_);
      Header const& h = message.header();
      reply.step = h.step;
      if (h.server != server_)
        return refuse(strata::detail::message("this is server ", server_, ", not server ", h.server));
      if (h.kind != Kind::push && h.element != Element::f32)
        return refuse(strata::detail::message("a ", name(h.kind), " carries no ", name(h.element),
                                              " numbers; only a push's gradient may be 16-bit"));
      if (h.kind == Kind::pull) {
        reply.kind = Kind::weights;
        ++pulls_;
        return encode(reply, {weights_.data(), weights_.size()});
      }
      if (h.kind == Kind::snapshot) {  // the weights, then each optimizer slot, back to back
        reply.kind = Kind::weights;
        std::vector<float> all(weights_.data(), weights_.data() + weights_.size());
        state_.for_each_slot([&](char const*, AlignedBuffer& slot) { all.insert(all.end(), slot.data(), slot.data() + slot.size()); });
        return encode(reply, all);
      }
      if (h.kind != Kind::push)
        return refuse(strata::detail::message("a server answers pull, push and snapshot, not ", name(h.kind)));
      if (message.floats() != weights_.size())
        return refuse(strata::detail::message("a push to server ", server_, " must hold its ", weights_.size(),
                                              " numbers, not ", message.floats()));
      if (h.version > version_ || h.version < 0 || h.step < 0)
        return refuse(strata::detail::message("a push of step ", h.step, " computed on version ", h.version,
                                              ", but this server is at version ", version_));
      if (h.step < restored_steps_ || applied_steps_.contains(h.step)) {  // already applied: at most once
        reply.kind = Kind::applied;
        return encode(reply, {});
      }
      if (version_ - h.version > staleness_) {
        reply.kind = Kind::stale;
        ++stale_;
        return encode(reply, {});
      }
      // An fp32 gradient is read in place where the frame holds it aligned (ZeroMQ's large
      // frames are), and copied out otherwise: 1.3 ms of the 3.4 ms an update of 7.5 MB took.
      // A 16-bit one (Compress<T>) is widened to fp32 first: the update is fp32.
      auto const* payload = message.payload();
      auto const begin = probe_ ? probe_->now() : 0;
      if (h.element == Element::f32 && reinterpret_cast<std::uintptr_t>(payload) % alignof(float) == 0) {
        apply({reinterpret_cast<float const*>(payload), weights_.size()});
      } else {
        gradient_.resize(weights_.size());
        message.copy_floats(0, gradient_);
        apply(gradient_);
      }
      if (probe_)
        probe_->record_apply(server_, begin, probe_->now(), h.step,
                             std::int64_t(weights_.size() * element_size(h.element)));
      applied_steps_.insert(h.step);
      reply.kind = Kind::applied;
      reply.version = version_;
      return encode(reply, {});
    } catch (std::exception const& e) {
      return refuse(e.what());
    }
  }

  // Answers requests on `socket` (a bound ROUTER) until `stop` is set; checks it every `tick`.
  void serve(zmq::socket_t& socket, std::atomic<bool> const& stop,
             std::chrono::milliseconds tick = std::chrono::milliseconds(20)) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    while (!stop.load(std::memory_order_acquire)) {
      if (zmq::poll(&item, 1, tick) == 0) continue;
      zmq::message_t identity, request;
      if (!socket.recv(identity, zmq::recv_flags::dontwait)) continue;
      if (!identity.more()) continue;  // not a peer's [identity][request]: nothing to answer
      (void)socket.recv(request);
      taken_over(request);
      while (request.more()) {  // extra frames: answer the first, drop the rest
        zmq::message_t extra;
        (void)socket.recv(extra);
        if (!extra.more()) break;
      }
      bool const stopping = is_stop(request);
      zmq::message_t reply = stopping ? encode(answer(Kind::applied), {}) : handle(request);
      socket.send(identity, zmq::send_flags::sndmore);
      handing_over(reply);
      socket.send(reply, zmq::send_flags::none);
      if (stopping) return;  // the chief ended the job
    }
  }

  // Continues from a checkpoint: this server's shards of the whole model's `weights` and of
  // the optimizer state `state` (laid out like them), after `steps` steps, all applied.
  void restore(std::span<float const> weights, typename Opt::State& state, std::int64_t steps) {
    pack(shards_, weights, weights_.data());
    std::vector<std::span<float const>> slots;
    state.for_each_slot([&](char const*, AlignedBuffer& slot) { slots.emplace_back(slot.data(), slot.size()); });
    std::size_t i = 0;
    state_.for_each_slot([&](char const*, AlignedBuffer& slot) { pack(shards_, slots[i++], slot.data()); });
    version_ = steps;
    restored_steps_ = steps;
    applied_steps_.clear();
  }
  // The inverse: this server's shards of the weights and optimizer state into the
  // whole-model `weights` and `state` (a checkpoint's), between requests.
  void copy_to(std::span<float> weights, typename Opt::State& state) {
    unpack(shards_, reinterpret_cast<std::byte const*>(weights_.data()), weights);
    std::vector<std::span<float>> slots;
    state.for_each_slot([&](char const*, AlignedBuffer& slot) { slots.emplace_back(slot.data(), slot.size()); });
    std::size_t i = 0;
    state_.for_each_slot([&](char const*, AlignedBuffer& slot) {
      unpack(shards_, reinterpret_cast<std::byte const*>(slot.data()), slots[i++]);
    });
  }

  // Whether `request` is this job's stop message (the chief's, at the end of a job).
  [[nodiscard]] bool is_stop(zmq::message_t const& request) const {
    try {
      return Message(request, job_).header().kind == Kind::stop;
    } catch (std::exception const&) {
      return false;  // handle() answers it with the reason
    }
  }

  // Times every applied push from now on (nullptr: no longer); before serve() starts.
  void attach_probe(profile::ClusterProbe* probe) { probe_ = probe; }

  [[nodiscard]] std::int64_t version() const { return version_; }
  [[nodiscard]] std::int64_t stale_pushes() const { return stale_; }
  [[nodiscard]] std::int64_t rejected_messages() const { return rejected_; }
  [[nodiscard]] std::span<float const> weights() const { return {weights_.data(), weights_.size()}; }
  [[nodiscard]] std::vector<Shard> const& shards() const { return shards_; }

 private:
  Header answer(Kind kind) const {
    Header h;
    h.kind = kind;
    h.job = job_;
    h.server = server_;
    h.version = version_;
    return h;
  }

  // Adam's t is the update's number on this server: version + 1, as OneDevice counts steps.
  void apply(std::span<float const> gradient) {
    std::size_t at = 0;
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      std::size_t const n = shards_[i].size();
      optimizer_.update(std::span<float>(weights_.data() + at, n), gradient.subspan(at, n), state_, at,
                        optim::StepInfo{version_ + 1, 1.0f, bool(decays_[i])});
      at += n;
    }
    ++version_;
  }

  Opt optimizer_;
  typename Opt::State state_;
  std::vector<Shard> shards_;
  std::vector<char> decays_;
  std::uint64_t job_;
  int server_;
  int staleness_;
  AlignedBuffer weights_;
  std::vector<float> gradient_;
  std::int64_t version_ = 0;
  std::int64_t pulls_ = 0, stale_ = 0, rejected_ = 0;
  std::set<std::int64_t> applied_steps_;
  std::int64_t restored_steps_ = 0;  // steps below it were applied before a restore
  profile::ClusterProbe* probe_ = nullptr;
};

}  // namespace strata::ps
