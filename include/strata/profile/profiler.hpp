#pragma once
// Profiler: the callback that turns profiling on for a fit and prints, at its end, where the
// time went and the memory high-water (profile/report.hpp), on the chief:
//
//   strata::Profiler profiler;                       // or Profiler{{.summary = false}}
//   trainer.fit(model, opt, loss, train, options, strata::ProgressBar{}, profiler);
//   double p99 = profiler.report().collectives->latency_ms.p99;
//
// A fit without a profiling callback (Profiler, TraceWriter, TensorBoard) reads no clock in
// its steps. `trainer.evaluate(model, loss, data, batch_size, profiler)` and `predict` profile
// their batches too.

#include <iostream>
#include <ostream>

#include "strata/profile/report.hpp"
#include "strata/profile/run_profile.hpp"

namespace strata::profile {

struct ProfilerOptions {
  bool summary = true;            // print the table at the end of fit (the chief only)
  std::ostream* out = &std::cout;
};

class Profiler {
 public:
  explicit Profiler(ProfilerOptions options = {}) : options_(options) {}

  void on_profile(RunProfile const& run) {
    run_ = run;
    report_ = summarize(run_);
    if (options_.summary && run.process == 0) *options_.out << report_.table() << std::flush;
  }

  // The last fit's figures, and every span it recorded (every worker's).
  [[nodiscard]] Report const& report() const { return report_; }
  [[nodiscard]] RunProfile const& run() const { return run_; }

 private:
  ProfilerOptions options_;
  RunProfile run_;
  Report report_;
};

}  // namespace strata::profile
