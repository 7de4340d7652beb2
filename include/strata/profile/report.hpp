#pragma once
// The figures of a profiled run: where each step's time went, per replica and per worker;
// the latency, volume and bus bandwidth of the gradient collectives and how much of them was
// hidden behind backward; and the memory high-water. `table()` prints them in the progress
// bar's style.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "strata/profile/memory.hpp"
#include "strata/profile/probe.hpp"
#include "strata/profile/run_profile.hpp"

namespace strata::profile {

struct Percentiles {
  double p50 = 0.0, p90 = 0.0, p99 = 0.0;
};

// Nearest-rank percentiles of `values` (sorted here).
inline Percentiles percentiles(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  auto rank = [&](double p) {
    auto const i = std::size_t(std::max(1.0, std::ceil(p * double(values.size()))));
    return values[std::min(i, values.size()) - 1];
  };
  return {rank(0.50), rank(0.90), rank(0.99)};
}

// nccl-tests' bus bandwidth of an all-reduce of `bytes` over `ranks` ranks taking `seconds`:
// the algorithm bandwidth (bytes / seconds) times 2 (ranks - 1) / ranks, the fraction of the
// data each rank's link carries in a ring, so that it compares with the hardware's peak.
inline double bus_bandwidth(double bytes, double seconds, int ranks) {
  if (seconds <= 0.0 || ranks < 2) return 0.0;
  return bytes / seconds * 2.0 * double(ranks - 1) / double(ranks);
}

struct PhaseTime {
  Phase phase = Phase::step;
  double seconds = 0.0;  // over the run; replica phases: the mean over replicas
  [[nodiscard]] double ms_per_step(std::int64_t steps) const { return steps ? seconds * 1e3 / double(steps) : 0.0; }
};

// One replica's own phases, summed over the run.
struct ReplicaTime {
  int worker = 0, replica = 0;
  double forward = 0.0, backward = 0.0, gradient_wait = 0.0, update = 0.0;
  double run = 0.0;  // a custom loop's Strategy::run functions
  double pull = 0.0, push = 0.0;  // a ParameterServer worker's messages
  [[nodiscard]] double compute() const { return forward + backward + run; }
};

struct Collectives {
  std::int64_t count = 0;     // bucket all-reduces, every replica's (a custom loop: its all_reduce calls)
  std::int64_t buckets_per_step = 0;
  double bytes_per_step = 0.0;  // one replica's buckets in one optimizer step
  Percentiles latency_ms;
  double bus_bandwidth = 0.0;   // bytes/s, median over the collectives
  double hidden = 0.0;          // fraction of collective time that ran while its replica's backward did
};

// ParameterServer: how the steps fell to the workers, how many passes a stale answer made
// them redo, and the latency of their messages and of the servers' updates.
struct ServerExchange {
  int servers = 0;
  std::int64_t fewest_steps = 0, most_steps = 0;  // steps a worker trained (the attempts the servers applied)
  int fewest_worker = 0, most_worker = 0;
  std::int64_t passes = 0;  // forward and backward passes the workers ran
  std::int64_t stale = 0;   // of them, those a server answered stale (computed again)
  Percentiles pull_ms, push_ms, apply_ms;
  double bytes = 0.0;       // a whole model's floats: what a pull fetches and a push sends
};

struct Report {
  std::string activity = "fit";         // fit, evaluate, predict (a step: one batch) or custom loop
  int workers = 1, world = 1;
  int servers = 0;                      // ParameterServer: its servers (world: its workers)
  std::int64_t steps = 0;               // the profiled steps (FitOptions::profile_steps)
  std::int64_t first_step = 0;          // the first of them, counted from the fit's start
  std::int64_t run_steps = 0;           // the steps the fit trained
  std::int64_t every = 0;               // profile_steps.every: a window of `steps_per_window` every this many
  std::int64_t steps_per_window = 0;
  double wall_seconds = 0.0;            // the chief's loop: data wait, steps, callbacks, validation
  std::vector<PhaseTime> phases;        // in Phase order, those that occurred
  std::vector<ReplicaTime> replicas;    // per worker and replica
  std::optional<Collectives> collectives;  // none where replicas reduce in place (Mirrored on the CPU)
  std::optional<ServerExchange> exchange;  // ParameterServer
  Memory memory;                        // the largest figure of any worker

  [[nodiscard]] std::optional<double> seconds_of(Phase p) const {
    for (auto const& t : phases)
      if (t.phase == p) return t.seconds;
    return std::nullopt;
  }

  // The summary printed at the end of fit.
  [[nodiscard]] std::string table() const {
    std::string out;
    char line[256];
    bool const fit = activity == "fit";
    if (servers > 0)
      std::snprintf(line, sizeof line, "Profile - %d worker%s, %d server%s (ParameterServer) - %s - %.2fs\n", world,
                    world == 1 ? "" : "s", servers, servers == 1 ? "" : "s", steps_text().c_str(), wall_seconds);
    else
      std::snprintf(line, sizeof line, "Profile%s%s - %d replica%s (%d worker%s) - %s - %.2fs\n", fit ? "" : " of ",
                    fit ? "" : activity.c_str(), world, world == 1 ? "" : "s", workers, workers == 1 ? "" : "s",
                    steps_text().c_str(), wall_seconds);
    out += line;
    out += per_batch() ? "  where the time went      ms/batch    share\n" : "  where the time went       ms/step    share\n";
    // The replicas' (workers') phases under the loop's phase that waits for them. Under
    // ParameterServer each step is one worker's, so a phase's time per step is the
    // workers' sum over the steps; its share is, as elsewhere, an average worker's.
    constexpr Phase order[] = {Phase::data_wait, Phase::step,    Phase::schedule,      Phase::pull,   Phase::forward,
                               Phase::backward,  Phase::run,     Phase::gradient_wait, Phase::update, Phase::push,
                               Phase::callbacks, Phase::validation};
    for (Phase const phase : order) {
      auto const t = seconds_of(phase);
      if (!t) continue;
      bool const inner = !on_training_loop(phase);
      char const* name = per_batch() && phase == Phase::step ? "batch" : name_of(phase);
      double const per_step = PhaseTime{phase, *t * (servers > 0 && inner ? world : 1)}.ms_per_step(steps);
      std::snprintf(line, sizeof line, "  %s%-*s %9.3f %7.1f%%\n", inner ? "  " : "", inner ? 22 : 24, name, per_step,
                    wall_seconds > 0 ? 100.0 * *t / wall_seconds : 0.0);
      out += line;
    }
    if (exchange) {
      ServerExchange const& e = *exchange;
      std::snprintf(line, sizeof line,
                    "  steps per worker - %lld (worker %d) to %lld (worker %d) - %lld of %lld passes computed again "
                    "after a stale answer\n",
                    static_cast<long long>(e.fewest_steps), e.fewest_worker, static_cast<long long>(e.most_steps),
                    e.most_worker, static_cast<long long>(e.stale), static_cast<long long>(e.passes));
      out += line;
      std::snprintf(line, sizeof line,
                    "  pull p50 %.3fms - push p50 %.3fms - p90 %.3fms - p99 %.3fms - %s each way - update on %d "
                    "server%s p50 %.3fms - p99 %.3fms\n",
                    e.pull_ms.p50, e.push_ms.p50, e.push_ms.p90, e.push_ms.p99, bytes_text(e.bytes).c_str(), e.servers,
                    e.servers == 1 ? "" : "s", e.apply_ms.p50, e.apply_ms.p99);
      out += line;
    } else if (replicas.size() > 1) {
      auto const [fastest, slowest] = std::minmax_element(
          replicas.begin(), replicas.end(), [](auto const& a, auto const& b) { return a.compute() < b.compute(); });
      auto ms = [&](ReplicaTime const& r) { return steps ? r.compute() * 1e3 / double(steps) : 0.0; };
      char const* what = fit ? "forward+backward" : activity == "custom loop" ? "run" : "forward";
      std::snprintf(line, sizeof line, "  %s per replica: %.3f ms (worker %d replica %d) to %.3f ms (worker %d replica %d)\n",
                    what, ms(*fastest), fastest->worker, fastest->replica, ms(*slowest), slowest->worker,
                    slowest->replica);
      out += line;
    }
    if (collectives && activity == "custom loop") {  // the loop's own all_reduce calls, inside its run spans
      Collectives const& c = *collectives;
      std::snprintf(line, sizeof line,
                    "  all-reduce - %lld call%s/step - p50 %.3fms - p90 %.3fms - p99 %.3fms - %s/step - bus %s/s\n",
                    static_cast<long long>(c.buckets_per_step), c.buckets_per_step == 1 ? "" : "s", c.latency_ms.p50,
                    c.latency_ms.p90, c.latency_ms.p99, bytes_text(c.bytes_per_step).c_str(),
                    bytes_text(c.bus_bandwidth).c_str());
      out += line;
    } else if (collectives) {
      Collectives const& c = *collectives;
      std::snprintf(line, sizeof line,
                    "  all-reduce - %lld bucket%s/step - p50 %.3fms - p90 %.3fms - p99 %.3fms - %s/step - bus %s/s - "
                    "%.0f%% hidden behind backward\n",
                    static_cast<long long>(c.buckets_per_step), c.buckets_per_step == 1 ? "" : "s", c.latency_ms.p50,
                    c.latency_ms.p90, c.latency_ms.p99, bytes_text(c.bytes_per_step).c_str(),
                    bytes_text(c.bus_bandwidth).c_str(), 100.0 * c.hidden);
      out += line;
    } else if (fit && servers == 0) {
      out += "  all-reduce - none: the replicas sum each other's gradients in place\n";
    }
    out += "  memory - peak RSS " + bytes_text(double(memory.peak_rss));
    if (memory.arena > 0)  // a custom loop's own buffers are not strata's to count
      out += " - arena " + bytes_text(double(memory.arena)) + " - activations " +
             bytes_text(double(memory.activations)) + " - workspaces " + bytes_text(double(memory.workspaces));
    if (memory.device >= 0) out += " - device " + bytes_text(double(memory.device));
    out += '\n';
    return out;
  }

  // evaluate and predict count batches; fit and custom loops, steps.
  [[nodiscard]] bool per_batch() const { return activity == "evaluate" || activity == "predict"; }

  // "469 steps", or for a window "steps 101-150 of 469" (1-based, as a progress bar counts).
  [[nodiscard]] std::string steps_text() const {
    char text[160];
    if (per_batch())
      std::snprintf(text, sizeof text, "%lld batch%s", static_cast<long long>(steps), steps == 1 ? "" : "es");
    else if (steps == run_steps)
      std::snprintf(text, sizeof text, "%lld steps", static_cast<long long>(steps));
    else if (every > 0 && steps > 0)  // "10 of every 100 steps from step 51: 60 of 569"
      std::snprintf(text, sizeof text, "%lld of every %lld steps from step %lld: %lld of %lld",
                    static_cast<long long>(steps_per_window), static_cast<long long>(every),
                    static_cast<long long>(first_step + 1), static_cast<long long>(steps),
                    static_cast<long long>(run_steps));
    else if (steps == 0)
      std::snprintf(text, sizeof text, "no step profiled: %s skips %lld steps, the %s %lld",
                    activity == "fit" ? "profile_steps" : "the window", static_cast<long long>(first_step),
                    activity == "fit" ? "fit trained" : "loop ran", static_cast<long long>(run_steps));
    else
      std::snprintf(text, sizeof text, "steps %lld-%lld of %lld", static_cast<long long>(first_step + 1),
                    static_cast<long long>(first_step + steps), static_cast<long long>(run_steps));
    return text;
  }

  static std::string bytes_text(double bytes) {
    char text[32];
    if (bytes >= 1e9) std::snprintf(text, sizeof text, "%.2f GB", bytes * 1e-9);
    else if (bytes >= 1e6) std::snprintf(text, sizeof text, "%.1f MB", bytes * 1e-6);
    else if (bytes >= 1e3) std::snprintf(text, sizeof text, "%.1f kB", bytes * 1e-3);
    else std::snprintf(text, sizeof text, "%.0f B", bytes);
    return text;
  }
};

// ParameterServer: a step's passes are its attempts; the last one is the one the servers
// applied, on the worker that trained the step.
inline ServerExchange exchange_of(RunProfile const& run) {
  ServerExchange e;
  e.servers = run.servers;
  std::map<std::int64_t, Span> last;  // per step, its last attempt's forward
  run.for_each(Phase::forward, [&](Span const& s) {
    ++e.passes;
    auto [it, fresh] = last.try_emplace(s.step, s);
    if (!fresh && s.attempt > it->second.attempt) it->second = s;
  });
  e.stale = e.passes - std::int64_t(last.size());
  std::vector<std::int64_t> steps(std::size_t(std::max(run.local_replicas, 1)), 0);
  for (auto const& [step, s] : last)
    if (s.replica >= 0 && std::size_t(s.replica) < steps.size()) ++steps[std::size_t(s.replica)];
  auto const [fewest, most] = std::minmax_element(steps.begin(), steps.end());
  e.fewest_steps = *fewest;
  e.most_steps = *most;
  e.fewest_worker = int(fewest - steps.begin());
  e.most_worker = int(most - steps.begin());
  auto latencies = [&](Phase phase) {
    std::vector<double> ms;
    run.for_each(phase, [&](Span const& s) {
      ms.push_back(s.seconds() * 1e3);
      if (phase == Phase::push) e.bytes = double(s.bytes);
    });
    return percentiles(std::move(ms));
  };
  e.pull_ms = latencies(Phase::pull);
  e.push_ms = latencies(Phase::push);
  e.apply_ms = latencies(Phase::apply);
  return e;
}

inline Report summarize(RunProfile const& run) {
  Report report;
  report.activity = run.activity;
  report.workers = run.workers;
  report.world = run.world;
  report.servers = run.servers;
  report.steps = run.steps;
  report.first_step = run.first_step;
  report.run_steps = run.run_steps;
  report.every = run.window.every;
  report.steps_per_window = run.window.steps;

  std::vector<double> totals(phase_count, 0.0);
  std::vector<bool> seen(phase_count, false);
  std::map<std::pair<int, int>, ReplicaTime> per_replica;
  for (Span const& s : run.spans) {
    seen[std::size_t(s.phase)] = true;
    if (s.replica < 0) {
      if (s.worker == 0) totals[std::size_t(s.phase)] += s.seconds();
      continue;
    }
    if (s.phase == Phase::all_reduce || s.phase == Phase::apply) continue;  // a communication thread's; a server's
    ReplicaTime& r = per_replica[{s.worker, s.replica}];
    r.worker = s.worker;
    r.replica = s.replica;
    double const t = s.seconds();
    switch (s.phase) {
      case Phase::forward: r.forward += t; break;
      case Phase::backward: r.backward += t; break;
      case Phase::gradient_wait: r.gradient_wait += t; break;
      case Phase::update: r.update += t; break;
      case Phase::run: r.run += t; break;
      case Phase::pull: r.pull += t; break;
      case Phase::push: r.push += t; break;
      default: break;
    }
  }
  for (auto const& [key, r] : per_replica) {
    report.replicas.push_back(r);
    double const n = double(per_replica.size());
    totals[std::size_t(Phase::forward)] += r.forward / n;
    totals[std::size_t(Phase::backward)] += r.backward / n;
    totals[std::size_t(Phase::gradient_wait)] += r.gradient_wait / n;
    totals[std::size_t(Phase::update)] += r.update / n;
    totals[std::size_t(Phase::run)] += r.run / n;
    totals[std::size_t(Phase::pull)] += r.pull / n;
    totals[std::size_t(Phase::push)] += r.push / n;
  }
  for (int p = 0; p < phase_count; ++p) {
    if (on_training_loop(Phase(p))) report.wall_seconds += totals[std::size_t(p)];
    if (seen[std::size_t(p)]) report.phases.push_back({Phase(p), totals[std::size_t(p)]});
  }

  // The collectives: latency, volume, bandwidth, and their overlap with their replica's backward.
  std::map<std::tuple<int, int, std::int64_t>, Span> backward;
  run.for_each(Phase::backward, [&](Span const& s) { backward[{s.worker, s.replica, s.step}] = s; });
  std::vector<double> latency_ms, bandwidth;
  double busy = 0.0, hidden = 0.0, bytes = 0.0;
  std::map<std::int64_t, std::int64_t> buckets_of_step;  // worker 0, replica 0
  run.for_each(Phase::all_reduce, [&](Span const& s) {
    double const t = s.seconds();
    latency_ms.push_back(t * 1e3);
    bandwidth.push_back(bus_bandwidth(double(s.bytes), t, run.world));
    busy += t;
    if (auto it = backward.find({s.worker, s.replica, s.step}); it != backward.end()) {
      std::int64_t const overlap =
          std::min(s.end_ns, it->second.end_ns) - std::max(s.begin_ns, it->second.begin_ns);
      if (overlap > 0) hidden += double(overlap) * 1e-9;
    }
    if (s.worker == 0 && s.replica == 0) {
      ++buckets_of_step[s.step];
      bytes += double(s.bytes);
    }
  });
  if (!latency_ms.empty()) {
    Collectives c;
    c.count = std::int64_t(latency_ms.size());
    c.latency_ms = percentiles(latency_ms);
    c.bus_bandwidth = percentiles(bandwidth).p50;
    c.hidden = busy > 0.0 ? hidden / busy : 0.0;
    if (!buckets_of_step.empty()) {
      c.buckets_per_step = buckets_of_step.begin()->second;
      c.bytes_per_step = bytes / double(buckets_of_step.size());
    }
    report.collectives = c;
  }
  if (run.servers > 0) report.exchange = exchange_of(run);
  for (Memory const& m : run.memory) {
    report.memory.peak_rss = std::max(report.memory.peak_rss, m.peak_rss);
    report.memory.rss = std::max(report.memory.rss, m.rss);
    report.memory.arena = std::max(report.memory.arena, m.arena);
    report.memory.activations = std::max(report.memory.activations, m.activations);
    report.memory.workspaces = std::max(report.memory.workspaces, m.workspaces);
    report.memory.device = std::max(report.memory.device, m.device);
  }
  return report;
}

}  // namespace strata::profile
