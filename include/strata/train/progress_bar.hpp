#pragma once
// ProgressBar: Keras-style progress. On a terminal one line per epoch is redrawn in place
//   Epoch 3/10
//   120/235 [============>.................] - ETA: 3s - loss: 0.4123 - accuracy: 0.8512 - 12ms/step
// elsewhere (logs, pipes) only the finished line of each epoch is printed.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "strata/train/logs.hpp"

namespace strata::train {

class ProgressBar {
 public:
  enum class Redraw { automatic, always, never };

  explicit ProgressBar(std::ostream& out = std::cout, Redraw redraw = Redraw::automatic) : out_(&out) {
    live_ = redraw == Redraw::always ||
            (redraw == Redraw::automatic && &out == &std::cout && ::isatty(::fileno(stdout)) == 1);
  }

  void on_train_begin(TrainBegin const& info) {
    epochs_ = info.epochs;
    chief_ = info.chief();  // the other workers of a job stay quiet
  }

  void on_epoch_begin(int epoch) {
    if (!chief_) return;
    *out_ << "Epoch " << epoch + 1 << '/' << epochs_ << '\n' << std::flush;
    last_draw_ = {};
  }

  void on_batch_end(BatchLogs const& logs) {
    if (!live_ || !chief_) return;
    auto const now = std::chrono::steady_clock::now();
    if (logs.step != logs.steps && now - last_draw_ < std::chrono::milliseconds(100)) return;  // keep the terminal calm
    last_draw_ = now;
    double const per_step = logs.seconds / double(logs.step);
    std::ostringstream line;
    line << '\r' << counter(logs.step, logs.steps) << ' ' << bar(logs.step, logs.steps);
    if (logs.step < logs.steps) line << " - ETA: " << std::lround(per_step * double(logs.steps - logs.step)) << 's';
    line << metric("loss", logs.loss);
    if (logs.accuracy) line << metric("accuracy", *logs.accuracy);
    line << " - " << std::lround(per_step * 1000.0) << "ms/step";
    *out_ << line.str() << "\033[K" << std::flush;
  }

  void on_epoch_end(EpochLogs const& logs) {
    if (!chief_) return;
    std::ostringstream line;
    if (live_) line << '\r';
    line << counter(logs.steps, logs.steps) << ' ' << bar(logs.steps, logs.steps) << " - " << std::fixed
         << std::setprecision(1) << logs.seconds << "s " << std::lround(logs.seconds * 1000.0 / double(logs.steps))
         << "ms/step";
    for (auto const& name : logs.names()) line << metric(name, *logs.get(name));
    *out_ << line.str() << (live_ ? "\033[K\n" : "\n") << std::flush;
  }

 private:
  // Built with append rather than operator+ on temporaries, which trips g++ 12's -Wrestrict at -O3.
  static std::string counter(std::int64_t step, std::int64_t steps) {
    std::ostringstream s;
    s << std::setw(int(std::to_string(steps).size())) << step << '/' << steps;
    return s.str();
  }
  static std::string bar(std::int64_t step, std::int64_t steps) {
    constexpr int width = 30;
    int const filled = int(double(width) * double(step) / double(steps));
    std::string s(1, '[');
    s.append(std::size_t(filled), '=');
    if (filled < width) s.append(1, '>').append(std::size_t(width - filled - 1), '.');
    s.append(1, ']');
    return s;
  }
  static std::string metric(std::string const& name, double value) {
    std::ostringstream s;
    s << " - " << name << ": " << std::fixed << std::setprecision(4) << value;
    return s.str();
  }

  std::ostream* out_;
  bool live_ = false;
  int epochs_ = 0;
  bool chief_ = true;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace strata::train
