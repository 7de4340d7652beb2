#pragma once
// Callbacks: any type with one or more of these hooks (detected at compile time, no virtual calls):
//   on_train_begin(TrainBegin const&)
//   on_epoch_begin(int epoch)
//   on_batch_end(BatchLogs const&)   -> void or bool
//   on_epoch_end(EpochLogs const&)   -> void or bool
//   on_train_end(History const&)
//   on_step_profile(profile::StepProfile const&)   after every batch's step, before on_batch_end
//   on_profile(profile::RunProfile const&)         at the end of fit, every worker's spans
// A hook that returns true stops training (after the current batch or epoch).
//
// The begin/end hooks may also take the run's io::TrainingState& as a second argument
// (the weights, optimizer state and progress): checkpoint callbacks save it, and
// BackupAndRestore loads into it in on_train_begin, which is where fit resumes from.
// A callback with a profiling hook (profile/run_profile.hpp) turns the step's probe on;
// without one, fit reads no clock in its steps.

#include <type_traits>

#include "strata/io/training_state.hpp"
#include "strata/profile/run_profile.hpp"
#include "strata/train/logs.hpp"

namespace strata::train {

template <class C>
concept Callback = requires(C& c) { c.on_train_begin(TrainBegin{}); } ||
                   requires(C& c, io::TrainingState& s) { c.on_train_begin(TrainBegin{}, s); } ||
                   requires(C& c) { c.on_epoch_begin(0); } ||
                   requires(C& c) { c.on_batch_end(BatchLogs{}); } ||
                   requires(C& c, io::TrainingState& s) { c.on_batch_end(BatchLogs{}, s); } ||
                   requires(C& c) { c.on_epoch_end(EpochLogs{}); } ||
                   requires(C& c, io::TrainingState& s) { c.on_epoch_end(EpochLogs{}, s); } ||
                   requires(C& c) { c.on_train_end(History{}); } ||
                   requires(C& c, io::TrainingState& s) { c.on_train_end(History{}, s); } ||
                   profile::ProfilingCallback<C>;

namespace detail {

// Calls a hook that may return bool (stop) or nothing.
template <class Call>
bool call_hook(Call&& call) {
  if constexpr (std::is_void_v<decltype(call())>) {
    call();
    return false;
  } else {
    return bool(call());
  }
}

// Calls c.HOOK(info, state) or c.HOOK(info), whichever the callback has; returns whether it asked to stop.
#define STRATA_CALL_HOOK(HOOK, c, info, state)                                        \
  [&] {                                                                               \
    if constexpr (requires { c.HOOK(info, state); })                                  \
      return call_hook([&] { return c.HOOK(info, state); });                          \
    else if constexpr (requires { c.HOOK(info); })                                    \
      return call_hook([&] { return c.HOOK(info); });                                 \
    else                                                                              \
      return false;                                                                   \
  }()

template <class... Cs>
struct Callbacks {
  static_assert((Callback<Cs> && ...),
                "strata::Trainer::fit: an argument after the options is not a callback; a callback needs at least one "
                "of on_train_begin, on_epoch_begin, on_batch_end, on_epoch_end, on_train_end, on_step_profile, "
                "on_profile");

  void train_begin(TrainBegin const& info, io::TrainingState& state, Cs&... cs) const {
    (STRATA_CALL_HOOK(on_train_begin, cs, info, state), ...);
    state.restored_kept.clear();  // what no callback took (memory a model's size)
  }
  void epoch_begin(int epoch, Cs&... cs) const {
    (([&] { if constexpr (requires { cs.on_epoch_begin(epoch); }) cs.on_epoch_begin(epoch); }()), ...);
  }
  bool batch_end(BatchLogs const& logs, io::TrainingState& state, Cs&... cs) const {
    bool stop = false;  // every callback sees the batch, in order, even after one asks to stop
    ((stop |= STRATA_CALL_HOOK(on_batch_end, cs, logs, state)), ...);
    return stop;
  }
  bool epoch_end(EpochLogs const& logs, io::TrainingState& state, Cs&... cs) const {
    bool stop = false;
    ((stop |= STRATA_CALL_HOOK(on_epoch_end, cs, logs, state)), ...);
    return stop;
  }
  void train_end(History const& history, io::TrainingState& state, Cs&... cs) const {
    (STRATA_CALL_HOOK(on_train_end, cs, history, state), ...);
  }
  void step_profile(profile::StepProfile const& step, Cs&... cs) const {
    (([&] { if constexpr (requires { cs.on_step_profile(step); }) cs.on_step_profile(step); }()), ...);
  }
  void profile(profile::RunProfile const& run, Cs&... cs) const {
    (([&] { if constexpr (requires { cs.on_profile(run); }) cs.on_profile(run); }()), ...);
  }
};

#undef STRATA_CALL_HOOK

}  // namespace detail
}  // namespace strata::train
