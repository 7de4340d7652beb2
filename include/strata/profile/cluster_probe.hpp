#pragma once
// The probe of a profiled Trainer<ParameterServer> fit (ps/trainer.hpp). Its workers and
// servers are threads that keep running while the training loop schedules the next steps,
// and a worker's step is not the loop's: each span carries the step (and attempt) it
// belongs to, and each thread records into a buffer of its own. The loop drains them only
// when no step is in flight (after the coordinator's join, at an epoch's end). A server's
// buffer also has a lock: its thread hands a push's answer to the worker through ZeroMQ,
// whose ordering a thread sanitizer cannot see; one uncontended lock per applied push costs
// nothing beside the update it times.
//
// A null ClusterProbe* is "not profiled": ps::Worker and ps::ShardServer test it once per
// phase, next to messages that take tens of microseconds.

#include <cstdint>
#include <mutex>
#include <vector>

#include "strata/core/aligned_buffer.hpp"
#include "strata/profile/probe.hpp"

namespace strata::profile {

class ClusterProbe {
 public:
  using Stamp = std::int64_t;

  ClusterProbe(int workers, int servers)
      : workers_(std::size_t(workers)), servers_(std::size_t(servers)) {
    for (auto& spans : workers_) spans.value.reserve(256);
  }

  // Time zero of the run: before any thread records.
  void start(Clock::time_point origin) { origin_ = origin; }
  [[nodiscard]] Stamp now() const { return since(origin_); }
  [[nodiscard]] int workers() const { return int(workers_.size()); }
  [[nodiscard]] int servers() const { return int(servers_.size()); }

  // By the training loop.
  void record_loop(Phase phase, Stamp begin, Stamp end, std::int64_t step) {
    loop_.push_back(span(phase, begin, end, step, -1));
  }
  // By worker thread `worker`: a part of attempt `attempt` (0-based) of step `step`.
  void record_worker(int worker, Phase phase, Stamp begin, Stamp end, std::int64_t step, int attempt,
                     std::int64_t bytes = 0) {
    Span s = span(phase, begin, end, step, worker, bytes);
    s.attempt = std::uint16_t(attempt);
    workers_[std::size_t(worker)].value.push_back(s);
  }
  // By server thread `server`: its update from step `step`'s push of `bytes`.
  void record_apply(int server, Stamp begin, Stamp end, std::int64_t step, std::int64_t bytes) {
    auto& buffer = servers_[std::size_t(server)].value;
    std::lock_guard lock(buffer.mutex);
    buffer.spans.push_back(span(Phase::apply, begin, end, step, server, bytes));
  }

  // Every span recorded since the last call, appended to `out` (loop, workers, servers).
  // On the loop, while no step is in flight.
  void drain(std::vector<Span>& out) {
    move_spans(loop_, out);
    for (auto& spans : workers_) move_spans(spans.value, out);
    for (auto& server : servers_) {
      std::lock_guard lock(server.value.mutex);
      move_spans(server.value.spans, out);
    }
  }

 private:
  struct Locked {
    std::mutex mutex;
    std::vector<Span> spans;
  };
  static Span span(Phase phase, Stamp begin, Stamp end, std::int64_t step, int thread, std::int64_t bytes = 0) {
    return {begin, end, step, bytes, 0, std::int16_t(thread), -1, phase};
  }

  Clock::time_point origin_ = Clock::now();
  std::vector<Span> loop_;
  std::vector<OnCacheLine<std::vector<Span>>> workers_;
  std::vector<OnCacheLine<Locked>> servers_;
};

}  // namespace strata::profile
