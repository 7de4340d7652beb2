#pragma once
// What profiling callbacks are handed: each step's spans as it ends (on_step_profile) and
// the whole run, every worker's spans merged, when fit ends (on_profile).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/profile/memory.hpp"
#include "strata/profile/probe.hpp"

namespace strata::profile {

// The steps of a fit whose spans are kept for on_profile (Profiler's summary, TraceWriter's
// trace): skip the first `skip` steps of the fit (warm-up), keep the next `steps`, and with
// `every` = P > 0 the first `steps` of every P steps after that too (torch.profiler's
// `repeat`): a long run is sampled along its length, in a bounded number of spans per P
// steps. on_step_profile still sees every step. Steps are the micro-batches this fit
// trains, counted from 0 at its start (after a restore too).
struct StepWindow {
  std::int64_t skip = 0;
  std::int64_t steps = std::numeric_limits<std::int64_t>::max();  // every step after the skipped ones
  std::int64_t every = 0;  // > 0: a window of `steps` starts every `every` steps; 0: one window

  [[nodiscard]] bool whole_run() const { return skip == 0 && steps == std::numeric_limits<std::int64_t>::max(); }
  // Whether step `step` of the fit (0-based) is kept.
  [[nodiscard]] bool keeps(std::int64_t step) const {
    if (step < skip) return false;
    return (every > 0 ? (step - skip) % every : step - skip) < steps;
  }
  // How many of a run's `trained` steps it keeps.
  [[nodiscard]] std::int64_t kept_of(std::int64_t trained) const {
    std::int64_t const after = std::max(trained - skip, std::int64_t{0});
    if (every == 0) return std::min(after, steps);
    return after / every * steps + std::min(after % every, steps);
  }

  // A ConfigError naming the window (`what`: "fit: profile_steps", say) where it cannot hold a step.
  void check(char const* what) const {
    if (skip < 0)
      throw ConfigError(strata::detail::message(what, ".skip ", skip,
                                                " must be >= 0 (the steps to leave out before the profiled ones)"));
    if (steps < 1)
      throw ConfigError(strata::detail::message(what, ".steps ", steps,
                                                " must be >= 1; leave it out to profile every step after the skipped ones"));
    if (every < 0 || (every > 0 && every < steps))
      throw ConfigError(strata::detail::message(
          what, ".every ", every, " must be 0 (one window) or at least .steps ", steps,
          steps == std::numeric_limits<std::int64_t>::max() ? " (set .steps: the steps profiled in each period)"
                                                            : " (windows would overlap)"));
  }
};

// After every global batch, on every worker: this process's spans of it.
struct StepProfile {
  int epoch = 0;
  std::int64_t step = 0;          // micro-batches trained in the run, this one included
  std::span<Span const> spans{};  // this process's, of this batch
  Memory memory{};                // this process, sampled now
  double learning_rate = std::numeric_limits<double>::quiet_NaN();  // of the next optimizer step
  std::optional<float> loss_scale{};                                // MixedPrecisionFp16's dynamic scale
  int world = 1;                  // replicas in sync across the job
};

// At the end of fit (or of a profiled evaluate or predict), on every worker: the run's spans of
// every worker, in worker order. In evaluate and predict a step is a batch, and each replica's
// `forward` its forward pass (and loss) of its shard.
struct RunProfile {
  std::string activity = "fit";  // fit, evaluate or predict
  int process = 0;               // the worker this copy was handed to (0: the chief)
  int workers = 1;
  int local_replicas = 1;  // replica threads (or GPUs) per worker
  int world = 1;           // replicas in sync: local_replicas × workers
  int servers = 0;         // ParameterServer: its servers (local_replicas: its workers); 0 elsewhere
  std::string config;      // the policies, as Config::describe() writes them
  std::int64_t steps = 0;  // micro-batches whose spans are kept: the run's, or those in FitOptions::profile_steps
  std::int64_t first_step = 0;  // the first kept step, counted from this fit's start (profile_steps.skip)
  std::int64_t run_steps = 0;   // micro-batches trained in this fit (not those before a restore)
  StepWindow window{};          // the window the kept steps are of
  std::vector<Span> spans;
  std::vector<Memory> memory;  // per worker, at the end of the run

  // `trained` steps run, of which `window` kept some.
  void set_steps(std::int64_t trained, StepWindow window = {}) {
    run_steps = trained;
    first_step = window.skip;
    steps = window.kept_of(trained);
    this->window = window;
  }

  // The spans of `phase` (of worker `worker`, or every worker's when -1).
  template <class F>
  void for_each(Phase phase, F&& f, int worker = -1) const {
    for (Span const& s : spans)
      if (s.phase == phase && (worker < 0 || s.worker == worker)) f(s);
  }
};

// Drops the spans from spans[first] on whose step, counted from `origin` (the fit's first
// micro-batch), is outside `window`.
inline void keep_window(std::vector<Span>& spans, std::size_t first, StepWindow window, std::int64_t origin) {
  if (window.whole_run()) return;
  auto const from = spans.begin() + std::ptrdiff_t(first);
  spans.erase(std::remove_if(from, spans.end(), [&](Span const& s) { return !window.keeps(s.step - origin); }),
              spans.end());
}

// Fills the job's side of `run` from `strategy` (a strategy::BasicStrategy) and replaces its
// spans and memory by every worker's (this one's: `memory` and its resident set).
// Collective: every process calls it.
template <class Strategy>
void gather_run(RunProfile& run, Strategy& strategy, Memory memory) {
  read_process_memory(memory);
  auto& processes = strategy.processes();
  run.process = processes.process();
  run.workers = processes.processes();
  run.local_replicas = Strategy::num_replicas;
  run.world = strategy.num_replicas_in_sync();
  run.config = Strategy::config::describe();
  run.memory = gather_all(processes, std::vector<Memory>{memory});
  run.spans = gather_all(processes, run.spans);
}

// Callbacks that take part in profiling: having either hook turns the probe on for the run.
// Spans are kept past their step only for a callback that reads the whole run.
template <class C>
concept RunProfilingCallback = requires(C& c) { c.on_profile(RunProfile{}); };
template <class C>
concept ProfilingCallback = requires(C& c) { c.on_step_profile(StepProfile{}); } || RunProfilingCallback<C>;

// Every process's `mine`, concatenated in process order, on every process (Processes:
// strategy/processes.hpp). Collective: every process calls it.
template <class Processes, class T>
  requires std::is_trivially_copyable_v<T>
std::vector<T> gather_all(Processes& processes, std::vector<T> const& mine) {
  int const n = processes.processes();
  if (n == 1) return mine;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
  std::int64_t const count = std::int64_t(mine.size());
  processes.all_gather(std::as_bytes(std::span<std::int64_t const>(&count, 1)),
                       std::as_writable_bytes(std::span<std::int64_t>(counts)));
  std::size_t const most = std::size_t(*std::max_element(counts.begin(), counts.end()));
  std::vector<T> padded(most), all(most * std::size_t(n));
  std::copy(mine.begin(), mine.end(), padded.begin());
  processes.all_gather(std::as_bytes(std::span<T const>(padded)), std::as_writable_bytes(std::span<T>(all)));
  std::vector<T> out;
  out.reserve(all.size());
  for (int p = 0; p < n; ++p)
    out.insert(out.end(), all.begin() + std::ptrdiff_t(std::size_t(p) * most),
               all.begin() + std::ptrdiff_t(std::size_t(p) * most + std::size_t(counts[std::size_t(p)])));
  return out;
}

}  // namespace strata::profile
