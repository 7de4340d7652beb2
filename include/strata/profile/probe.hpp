#pragma once
// What a profiled training step records, and the probe that records it.
//
// A step is timed by a probe type chosen at compile time: `NoProbe` (the default) has empty
// inline members and a stamp with no state, so a run without profiling compiles to the same
// step as before (scripts/count-step-instructions counts it); `Probe<Replicas>` reads the
// steady clock at each phase boundary and appends one Span per phase to the buffer of the
// thread that ran it. Each replica thread writes only its own buffer, and the trainer drains
// them between steps, so recording takes no lock.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/aligned_buffer.hpp"

namespace strata::profile {

using Clock = std::chrono::steady_clock;

// The parts of a step. Replica phases run on replica threads; all_reduce on a replica's
// communication thread (one span per gradient bucket); the rest on the training loop. Under
// ParameterServer the replicas are the workers, which pull, compute and push, and `apply`
// runs on the servers (profile/cluster_probe.hpp).
enum class Phase : std::uint8_t {
  data_wait,      // the loop waiting for the next batch (the input pipeline)
  step,           // the whole train_on_batch call, all replicas
  forward,        // forward pass and loss of one replica
  backward,       // backward pass of one replica
  gradient_wait,  // after backward, until every gradient is readable (other replicas, buckets in flight)
  update,         // the reduction of the owned slice and the optimizer's update of it
  all_reduce,     // one gradient bucket's collective
  callbacks,      // the callbacks' on_batch_end
  validation,     // evaluation on FitOptions::validation at the end of an epoch
  run,            // one replica's function in Strategy::run (a custom loop: profile/loop_profiler.hpp)
  schedule,       // ParameterServer: the loop handing a batch to the coordinator (waiting for a free
                  // worker or the staleness bound) and, at an epoch's end, for the last steps
  pull,           // ParameterServer: a worker fetching every server's weights
  push,           // ParameterServer: a worker sending each server its part of the gradient, until all answer
  apply,          // ParameterServer: a server applying one push to its shards (replica: the server)
};
inline constexpr int phase_count = 14;

// The phases the training loop runs (the rest run on replica threads): what adds up to the
// wall time of a run.
constexpr bool on_training_loop(Phase p) {
  return p == Phase::data_wait || p == Phase::step || p == Phase::callbacks || p == Phase::validation ||
         p == Phase::schedule;
}

inline char const* name_of(Phase p) {
  constexpr std::array<char const*, phase_count> names = {"data wait", "step",      "forward",   "backward",
                                                          "gradient wait", "update", "all-reduce", "callbacks",
                                                          "validation", "run",      "schedule",  "pull",
                                                          "push",      "apply"};
  return names[std::size_t(p)];
}

// One timed interval. Times are nanoseconds since the run's origin on this process.
struct Span {
  std::int64_t begin_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t step = 0;     // the micro-batch of the run it belongs to (0-based)
  std::int64_t bytes = 0;    // all_reduce: bytes of the bucket
  std::int32_t worker = 0;   // the process (MultiWorkerMirrored rank)
  std::int16_t replica = -1; // local replica; -1: the training loop
  std::int16_t bucket = -1;  // all_reduce: the bucket's index in the plan
  Phase phase = Phase::step;
  std::uint16_t attempt = 0; // ParameterServer: the step's attempt (1, 2, ...: after a server answered stale)

  [[nodiscard]] double seconds() const { return double(end_ns - begin_ns) * 1e-9; }
};

// Nanoseconds since `origin`.
inline std::int64_t since(Clock::time_point origin, Clock::time_point t = Clock::now()) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin).count();
}

// Appends `spans` to `out` and empties it, keeping its capacity (no allocation next step).
inline void move_spans(std::vector<Span>& spans, std::vector<Span>& out) {
  out.insert(out.end(), spans.begin(), spans.end());
  spans.clear();
}

// One replica thread's handle on a probe, for code not templated on the replica count:
// strategy::BasicReplicaContext times a custom loop's collectives through it. It appends to
// that replica's buffer, as the probe's record(replica, ...) does. Default: untimed.
class ReplicaTimer {
 public:
  ReplicaTimer() = default;
  ReplicaTimer(Clock::time_point origin, std::vector<Span>& spans, std::int64_t const& step, int worker, int replica)
      : origin_(origin), spans_(&spans), step_(&step), worker_(worker), replica_(std::int16_t(replica)) {}

  [[nodiscard]] explicit operator bool() const { return spans_ != nullptr; }
  [[nodiscard]] std::int64_t now() const { return since(origin_); }
  void record(Phase phase, std::int64_t begin, std::int64_t end, int index = -1, std::int64_t bytes = 0) const {
    spans_->push_back({begin, end, *step_, bytes, worker_, replica_, std::int16_t(index), phase});
  }

 private:
  Clock::time_point origin_{};
  std::vector<Span>* spans_ = nullptr;
  std::int64_t const* step_ = nullptr;
  std::int32_t worker_ = 0;
  std::int16_t replica_ = -1;
};

// The probe of a run without profiling: nothing is read, nothing is stored.
struct NoProbe {
  static constexpr bool enabled = false;
  struct Stamp {};
  static Stamp now() { return {}; }
  static void record(int, Phase, Stamp, Stamp) {}
  static void set_step(std::int64_t) {}
};

// The probe of a profiled run with `Replicas` replica threads in this process.
template <int Replicas>
class Probe {
 public:
  static constexpr bool enabled = true;
  using Stamp = std::int64_t;

  Probe() {
    for (auto& spans : replicas_) spans.value.reserve(64);  // a step's spans: no allocation while it runs
    loop_.reserve(16);
  }

  // `origin`: time zero of the run; `worker`: this process.
  void start(Clock::time_point origin, int worker) {
    origin_ = origin;
    worker_ = worker;
  }

  [[nodiscard]] Stamp now() const { return since(origin_); }
  [[nodiscard]] Stamp at(Clock::time_point t) const { return since(origin_, t); }
  [[nodiscard]] Clock::time_point origin() const { return origin_; }
  [[nodiscard]] int worker() const { return worker_; }

  // The step the following spans belong to (the loop sets it before the step runs).
  void set_step(std::int64_t step) { step_ = step; }

  // By replica thread `replica` (-1: the training loop) only.
  void record(int replica, Phase phase, Stamp begin, Stamp end, int bucket = -1, std::int64_t bytes = 0) {
    Span const s{begin, end, step_, bytes, worker_, std::int16_t(replica), std::int16_t(bucket), phase};
    (replica < 0 ? loop_ : replicas_[std::size_t(replica)].value).push_back(s);
  }

  // Replica `replica`'s handle, for its thread (while the probe lives).
  [[nodiscard]] ReplicaTimer timer(int replica) {
    return {origin_, replicas_[std::size_t(replica)].value, step_, worker_, replica};
  }

  // Between steps, on the training loop: appends every span recorded since the last call to
  // `out` and forgets them.
  void drain(std::vector<Span>& out) {
    move_spans(loop_, out);
    for (auto& spans : replicas_) move_spans(spans.value, out);
  }

 private:
  Clock::time_point origin_ = Clock::now();
  int worker_ = 0;
  std::int64_t step_ = 0;
  std::vector<Span> loop_;
  std::array<OnCacheLine<std::vector<Span>>, Replicas> replicas_{};
};

}  // namespace strata::profile
