#pragma once
// Rendezvous: where the N threads of one in-process communicator meet. Each rank publishes
// what it passes to a collective, then waits at a barrier that ends in a CommError when a
// rank does not arrive within the timeout (naming the ranks that did and what they called)
// or when another rank aborted the group. After either, the rendezvous stays aborted: every
// later arrival throws at once, so no thread is left waiting for a peer that has gone.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "strata/comm/communicator.hpp"
#include "strata/comm/wait.hpp"
#include "strata/core/error.hpp"

namespace strata::comm {

// Thrown in a rank whose group another rank aborted (the abort names the first cause).
class GroupAborted : public CommError {
  using CommError::CommError;
};

class Rendezvous {
 public:
  // What one rank passes to the collective in progress.
  struct Entry {
    CallDescriptor call;
    void const* input = nullptr;
    void* output = nullptr;
  };

  explicit Rendezvous(int size, std::chrono::milliseconds timeout = default_timeout)
      : size_(size), timeout_(timeout), slots_(std::make_unique<Slot[]>(std::size_t(size > 0 ? size : 1))) {
    if (size < 1 || size > int(count_mask))
      throw ConfigError(strata::detail::message("Rendezvous: size ", size, " must be in 1..", count_mask));
    if (timeout.count() <= 0)
      throw ConfigError(strata::detail::message("Rendezvous: timeout ", timeout.count(), " ms must be positive"));
  }
  Rendezvous(Rendezvous const&) = delete;
  Rendezvous& operator=(Rendezvous const&) = delete;

  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  void publish(int rank, Entry const& entry) { slots_[std::size_t(rank)].entry = entry; }
  [[nodiscard]] Entry const& entry(int rank) const { return slots_[std::size_t(rank)].entry; }

  // Waits until every rank has arrived. Throws CommError on timeout, GroupAborted if the
  // group was aborted before or while waiting. `who` names the engine in messages.
  void arrive_and_wait(int rank, char const* who = "ThreadCommunicator") {
    Slot& me = slots_[std::size_t(rank)];
    std::uint64_t const round = me.arrivals.load(std::memory_order_relaxed) + 1;
    me.arrivals.store(round, std::memory_order_release);  // after publish: a timed-out peer may read our entry
    std::uint32_t word = state_.load(std::memory_order_acquire);
    for (;;) {
      if (word & aborted_bit) throw_aborted();
      bool const last = (word & count_mask) + 1 == std::uint32_t(size_);
      std::uint32_t const next = last ? (word & generation_mask) + generation_one : word + 1;
      if (state_.compare_exchange_weak(word, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
        if (last) {
          detail::wake_all(state_);
          return;
        }
        break;
      }
    }
    std::uint32_t const generation = word & generation_mask;
    auto const deadline = detail::Clock::now() + timeout_;
    for (;;) {
      bool const done = detail::wait_for(
          state_, [&](std::uint32_t w) { return (w & generation_mask) != generation || (w & aborted_bit); }, deadline,
          spins_);
      std::uint32_t w = state_.load(std::memory_order_acquire);
      if ((w & generation_mask) != generation) return;  // the barrier completed
      if (w & aborted_bit) throw_aborted();
      if (!done) {
        // Abort, unless the last rank completes the barrier at this very moment (then the CAS fails).
        if (state_.compare_exchange_strong(w, w | aborted_bit, std::memory_order_acq_rel, std::memory_order_acquire)) {
          std::string message = timeout_message(rank, round, who);
          set_reason(message);
          throw CommError(message);
        }
      }
    }
  }

  // Aborts the group: ranks waiting now and arriving later throw GroupAborted(reason).
  void abort(std::string const& reason) {
    std::uint32_t w = state_.load(std::memory_order_acquire);
    while (!(w & aborted_bit))
      if (state_.compare_exchange_weak(w, w | aborted_bit, std::memory_order_acq_rel, std::memory_order_acquire)) {
        set_reason(reason);
        return;
      }
  }
  [[nodiscard]] bool aborted() const { return state_.load(std::memory_order_acquire) & aborted_bit; }

  // Makes an aborted rendezvous usable again. Only while no rank is inside a collective.
  void reset() {
    state_.store(0, std::memory_order_release);
    reason_ready_.store(false, std::memory_order_release);
    for (int r = 0; r < size_; ++r) slots_[std::size_t(r)].arrivals.store(0, std::memory_order_relaxed);
  }

 private:
  // state_: arrived count (bits 0-14), aborted flag (bit 15), generation (bits 16-31). One
  // word, so that arriving and aborting on timeout cannot both succeed.
  static constexpr std::uint32_t count_mask = 0x7fff;
  static constexpr std::uint32_t aborted_bit = 0x8000;
  static constexpr std::uint32_t generation_one = 0x10000;
  static constexpr std::uint32_t generation_mask = 0xffff0000;

  struct alignas(64) Slot {
    Entry entry;
    std::atomic<std::uint64_t> arrivals{0};  // barriers this rank has entered
  };

  void set_reason(std::string reason) {
    {
      std::lock_guard lock(reason_mutex_);
      reason_ = std::move(reason);
    }
    reason_ready_.store(true, std::memory_order_release);
    detail::wake_all(state_);
  }

  [[noreturn]] void throw_aborted() {
    while (!reason_ready_.load(std::memory_order_acquire)) detail::cpu_relax();  // the aborter is writing it
    std::lock_guard lock(reason_mutex_);
    throw GroupAborted("the communicator was aborted: " + reason_);
  }

  std::string timeout_message(int rank, std::uint64_t round, char const* who) const {
    auto arrived = [&](int r) { return slots_[std::size_t(r)].arrivals.load(std::memory_order_acquire) >= round; };
    auto call_of = [&](int r) { return entry(r).call; };
    return strata::detail::message(who, ": ", entry(rank).call.describe(), " on rank ", rank, " of ", size_, " ",
                                   detail::timeout_report(timeout_, size_, arrived, call_of));
  }

  int size_;
  int spins_ = detail::spin_budget(size_);
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<std::uint32_t> state_{0};
  std::atomic<bool> reason_ready_{false};
  std::mutex reason_mutex_;
  std::string reason_;
};

}  // namespace strata::comm
