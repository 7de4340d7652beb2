#pragma once
// LoopProfiler: the profile of a custom loop (Strategy::run), handed to the same callbacks as
// fit's (Profiler's summary, TraceWriter's trace):
//
//   strata::Strategy<strata::Mirrored<2>> strategy;
//   strata::LoopProfiler loop(strategy);              // collective: the workers' clocks start together
//   for (auto const& batch : strategy.distribute(train.batch(256))) {
//     auto const step = loop.step();                  // this iteration is one step
//     strategy.run(train_step, batch);                // each replica's function: a `run` span
//   }
//   strata::Profiler profiler;
//   loop.finish(profiler, strata::TraceWriter{"loop.json"});   // collective
//
// While it lives the strategy times every replica's function in run(); the loop records each
// step, and the wait between steps (the loop's own work: reading the next batch, logging) as
// `data wait`. What happens inside a function (forward, backward, collectives) is the
// user's code and is not split.

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/profile/memory.hpp"
#include "strata/profile/probe.hpp"
#include "strata/profile/run_profile.hpp"

namespace strata::profile {

template <class Strategy>
class LoopProfiler {
 public:
  static constexpr int replicas = Strategy::num_replicas;

  // `window`: the steps whose spans are kept (FitOptions::profile_steps' meaning).
  explicit LoopProfiler(Strategy& strategy, StepWindow window = {}) : strategy_(&strategy), window_(window) {
    window.check("LoopProfiler: window");
    if (strategy.probe_attached())
      throw ConfigError("LoopProfiler: this strategy is already profiled by another LoopProfiler; finish that one first");
    strategy.agree([] { return false; });
    probe_.start(Clock::now(), strategy.processes().process());
    fetch_begin_ = probe_.now();
    strategy.attach_probe(&probe_);
  }
  ~LoopProfiler() {
    if (strategy_) strategy_->attach_probe(nullptr);
  }
  LoopProfiler(LoopProfiler const&) = delete;
  LoopProfiler& operator=(LoopProfiler const&) = delete;

  // One iteration of the loop, from here until the object goes out of scope.
  class Step {
   public:
    explicit Step(LoopProfiler& loop) : loop_(&loop), begin_(loop.probe_.now()) {}
    ~Step() { loop_->end_step(begin_); }
    Step(Step const&) = delete;
    Step& operator=(Step const&) = delete;

   private:
    LoopProfiler* loop_;
    std::int64_t begin_;
  };

  [[nodiscard]] Step step() {
    if (!strategy_) throw ConfigError("LoopProfiler::step: the profiler has finished; make a new one to profile again");
    if (open_) throw ConfigError("LoopProfiler::step: the previous step is still open; let its object go out of scope first");
    open_ = true;
    probe_.set_step(steps_);
    return Step(*this);
  }

  [[nodiscard]] std::int64_t steps() const { return steps_; }

  // Every worker's spans, merged, to `callbacks` (those with on_profile) on every worker.
  // Collective: every process calls it, once.
  template <class... Cs>
  void finish(Cs&&... callbacks) {
    static_assert((RunProfilingCallback<std::remove_cvref_t<Cs>> && ...),
                  "LoopProfiler::finish takes callbacks with on_profile (strata::Profiler, strata::TraceWriter)");
    if (!strategy_) throw ConfigError("LoopProfiler::finish: already finished; make a new LoopProfiler to profile again");
    if (open_) throw ConfigError("LoopProfiler::finish: a step is still open; finish after its object goes out of scope");
    Strategy& strategy = *strategy_;
    strategy.attach_probe(nullptr);
    strategy_ = nullptr;
    drain();
    RunProfile run;
    run.activity = "custom loop";
    run.set_steps(steps_, window_);
    run.spans = std::move(spans_);
    gather_run(run, strategy, Memory{});
    (callbacks.on_profile(run), ...);
  }

 private:
  // On the loop's thread, after the step's run() calls returned: no replica is recording.
  void end_step(std::int64_t begin) {
    std::int64_t const end = probe_.now();
    probe_.record(-1, Phase::data_wait, fetch_begin_, begin);
    probe_.record(-1, Phase::step, begin, end);
    fetch_begin_ = end;
    ++steps_;
    open_ = false;
    drain();
  }

  void drain() {
    std::size_t const first = spans_.size();
    probe_.drain(spans_);
    keep_window(spans_, first, window_, 0);
  }

  Strategy* strategy_;
  StepWindow window_;
  Probe<replicas> probe_;
  std::vector<Span> spans_;
  std::int64_t steps_ = 0;
  std::int64_t fetch_begin_ = 0;
  bool open_ = false;
};

}  // namespace strata::profile
