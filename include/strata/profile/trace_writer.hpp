#pragma once
// TraceWriter{"trace.json"}: the run's timeline in the Chrome trace-event format, which
// Perfetto (ui.perfetto.dev) and chrome://tracing load, in the spirit of Horovod's timeline.
// One process per worker, and in each one track for the training loop (data wait, step,
// callbacks, validation), one per replica thread (forward, backward, gradient wait, update)
// and one per replica's communication (each gradient bucket's all-reduce, with its bytes).
// The chief writes one file holding every worker's tracks, atomically, when fit ends.
// Under ParameterServer the process holds the cluster: one track per worker (pull, forward,
// backward, push, each with its step and attempt) and one per server (its updates).
//
// Times are microseconds since the run began on each worker; workers start their clocks
// together after a collective, so tracks of different machines align to within its latency.

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "strata/io/atomic_file.hpp"
#include "strata/profile/run_profile.hpp"

namespace strata::profile {

// The trace-event JSON of `run` (what TraceWriter writes).
inline std::string chrome_trace(RunProfile const& run) {
  std::string out;
  out.reserve(run.spans.size() * 130 + 4096);
  char event[320];
  // 0: the loop; 1 + 2r: replica r; 2 + 2r: its communication; after the replicas, the servers.
  auto track = [&](Span const& s) {
    if (s.phase == Phase::apply) return 1 + 2 * run.local_replicas + int(s.replica);
    return s.replica < 0 ? 0 : 1 + 2 * int(s.replica) + (s.phase == Phase::all_reduce ? 1 : 0);
  };
  bool const cluster = run.servers > 0;
  auto meta = [&](char const* what, int pid, int tid, std::string const& name) {
    std::snprintf(event, sizeof event, "{\"ph\":\"M\",\"name\":\"%s_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n",
                  what, pid, tid, name.c_str());
    out += event;
    std::snprintf(event, sizeof event, "{\"ph\":\"M\",\"name\":\"%s_sort_index\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}},\n",
                  what, pid, tid, tid);
    out += event;
  };
  out += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"strata\",\"activity\":\"";
  out += run.activity;
  out += "\",\"config\":\"";
  out += run.config;
  out += "\"},\"traceEvents\":[\n";
  for (int w = 0; w < run.workers; ++w) {
    meta("process", w, 0, cluster ? std::string("ParameterServer cluster") : "worker " + std::to_string(w));
    meta("thread", w, 0, "training loop");
    for (int r = 0; r < run.local_replicas; ++r) {
      meta("thread", w, 1 + 2 * r, (cluster ? "worker " : "replica ") + std::to_string(r));
      if (!cluster) meta("thread", w, 2 + 2 * r, "replica " + std::to_string(r) + " all-reduce");
    }
    for (int s = 0; s < run.servers; ++s) meta("thread", w, 1 + 2 * run.local_replicas + s, "server " + std::to_string(s));
  }
  for (Span const& s : run.spans) {
    double const ts = double(s.begin_ns) * 1e-3, dur = double(s.end_ns - s.begin_ns) * 1e-3;
    if (s.phase == Phase::all_reduce)
      std::snprintf(event, sizeof event,
                    "{\"ph\":\"X\",\"name\":\"all-reduce %s %d\",\"cat\":\"communication\",\"pid\":%d,\"tid\":%d,"
                    "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%lld,\"bytes\":%lld}},\n",
                    run.activity == "custom loop" ? "call" : "bucket", int(s.bucket), int(s.worker), track(s), ts, dur, static_cast<long long>(s.step),
                    static_cast<long long>(s.bytes));
    else if (cluster && s.replica >= 0)  // a worker's pass (each attempt of a step) or a server's update
      std::snprintf(event, sizeof event,
                    "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%lld,\"attempt\":%d,\"bytes\":%lld}},\n",
                    name_of(s.phase),
                    s.phase == Phase::apply                              ? "server"
                    : s.phase == Phase::pull || s.phase == Phase::push ? "communication"
                                                                         : "compute",
                    int(s.worker), track(s), ts, dur, static_cast<long long>(s.step), int(s.attempt),
                    static_cast<long long>(s.bytes));
    else
      std::snprintf(event, sizeof event,
                    "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%lld}},\n",
                    name_of(s.phase), s.replica < 0 ? "loop" : "compute", int(s.worker), track(s), ts, dur,
                    static_cast<long long>(s.step));
    out += event;
  }
  if (out.size() >= 2 && out[out.size() - 2] == ',') out.erase(out.size() - 2, 1);  // no comma after the last event
  out += "]}\n";
  return out;
}

class TraceWriter {
 public:
  explicit TraceWriter(std::filesystem::path path) : path_(std::move(path)) {}

  void on_profile(RunProfile const& run) {
    if (run.process != 0) return;  // the chief writes every worker's tracks
    std::string const json = chrome_trace(run);
    io::write_file_atomically(path_, [&](io::FileWriter& file) { file.append(std::as_bytes(std::span(json))); });
  }

  [[nodiscard]] std::filesystem::path const& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace strata::profile
