#pragma once
// Callbacks: any type with one or more of these hooks (detected at compile time, no virtual calls):
//   on_train_begin(TrainBegin const&)
//   on_epoch_begin(int epoch)
//   on_batch_end(BatchLogs const&)   -> void or bool
//   on_epoch_end(EpochLogs const&)   -> void or bool
//   on_train_end(History const&)
// A hook that returns true stops training (after the current batch or epoch).

#include <type_traits>

#include "strata/train/logs.hpp"

namespace strata::train {

template <class C>
concept Callback = requires(C& c) { c.on_train_begin(TrainBegin{}); } ||
                   requires(C& c) { c.on_epoch_begin(0); } ||
                   requires(C& c) { c.on_batch_end(BatchLogs{}); } ||
                   requires(C& c) { c.on_epoch_end(EpochLogs{}); } ||
                   requires(C& c) { c.on_train_end(History{}); };

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

template <class... Cs>
struct Callbacks {
  static_assert((Callback<Cs> && ...),
                "strata::Trainer::fit: an argument after the options is not a callback; a callback needs at least one "
                "of on_train_begin, on_epoch_begin, on_batch_end, on_epoch_end, on_train_end");

  void train_begin(TrainBegin const& info, Cs&... cs) const {
    (([&] { if constexpr (requires { cs.on_train_begin(info); }) cs.on_train_begin(info); }()), ...);
  }
  void epoch_begin(int epoch, Cs&... cs) const {
    (([&] { if constexpr (requires { cs.on_epoch_begin(epoch); }) cs.on_epoch_begin(epoch); }()), ...);
  }
  bool batch_end(BatchLogs const& logs, Cs&... cs) const {
    bool stop = false;
    (([&] { if constexpr (requires { cs.on_batch_end(logs); }) stop |= call_hook([&] { return cs.on_batch_end(logs); }); }()), ...);
    return stop;
  }
  bool epoch_end(EpochLogs const& logs, Cs&... cs) const {
    bool stop = false;
    (([&] { if constexpr (requires { cs.on_epoch_end(logs); }) stop |= call_hook([&] { return cs.on_epoch_end(logs); }); }()), ...);
    return stop;
  }
  void train_end(History const& history, Cs&... cs) const {
    (([&] { if constexpr (requires { cs.on_train_end(history); }) cs.on_train_end(history); }()), ...);
  }
};

}  // namespace detail
}  // namespace strata::train
