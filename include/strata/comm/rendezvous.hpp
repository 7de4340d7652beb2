#pragma once
// Rendezvous: where the ranks of one communicator meet. Each rank publishes what it passes
// to a collective, then waits at a barrier that ends in a CommError when a rank does not
// arrive within the timeout (naming the ranks that did and what they called) or when another
// rank aborted the group. After either, the rendezvous stays aborted: every later arrival
// throws at once, so no rank is left waiting for a peer that has gone.
//
// What the ranks share (State and one Slot per rank) is plain memory with atomics in it:
// owned by the rendezvous when its ranks are threads (ThreadCommunicator), or placed in a
// segment that several processes map (ShmCommunicator), whose waits are then process-shared.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

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

  // One rank's published entry and how many barriers it has entered.
  struct alignas(64) Slot {
    Entry entry;
    std::atomic<std::uint64_t> arrivals{0};
  };
  // The barrier word and the reason of an abort, written once by the rank that aborted.
  struct State {
    static constexpr std::size_t reason_capacity = 4096;
    alignas(64) std::atomic<std::uint32_t> word{0};
    std::atomic<std::uint32_t> reason_ready{0};
    char reason[reason_capacity] = {};
  };
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
                "a rendezvous in shared memory needs lock-free atomics");

  // Ranks that are threads of this process: the rendezvous owns what they share.
  explicit Rendezvous(int size, std::chrono::milliseconds timeout = default_timeout)
      : Rendezvous(size, timeout, nullptr, nullptr, detail::Sharing::threads) {}
  // Ranks that may be processes: `state` and `slots[size]` live in memory they all map,
  // constructed once (by one rank) before any rank meets.
  Rendezvous(State& state, Slot* slots, int size, std::chrono::milliseconds timeout, detail::Sharing sharing)
      : Rendezvous(size, timeout, &state, slots, sharing) {}
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
    std::atomic<std::uint32_t>& state = state_->word;
    std::uint32_t word = state.load(std::memory_order_acquire);
    for (;;) {
      if (word & aborted_bit) throw_aborted();
      bool const last = (word & count_mask) + 1 == std::uint32_t(size_);
      std::uint32_t const next = last ? (word & generation_mask) + generation_one : word + 1;
      if (state.compare_exchange_weak(word, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
        if (last) {
          detail::wake_all(state, sharing_);
          return;
        }
        break;
      }
    }
    std::uint32_t const generation = word & generation_mask;
    auto const deadline = detail::Clock::now() + timeout_;
    for (;;) {
      bool const done = detail::wait_for(
          state, [&](std::uint32_t w) { return (w & generation_mask) != generation || (w & aborted_bit); }, deadline,
          spins_, sharing_);
      std::uint32_t w = state.load(std::memory_order_acquire);
      if ((w & generation_mask) != generation) return;  // the barrier completed
      if (w & aborted_bit) throw_aborted();
      if (!done) {
        // Abort, unless the last rank completes the barrier at this very moment (then the CAS fails).
        if (state.compare_exchange_strong(w, w | aborted_bit, std::memory_order_acq_rel, std::memory_order_acquire)) {
          std::string message = timeout_message(rank, round, who);
          set_reason(message);
          throw CommError(message);
        }
      }
    }
  }

  // Aborts the group: ranks waiting now and arriving later throw GroupAborted(reason).
  void abort(std::string const& reason) {
    std::uint32_t w = state_->word.load(std::memory_order_acquire);
    while (!(w & aborted_bit))
      if (state_->word.compare_exchange_weak(w, w | aborted_bit, std::memory_order_acq_rel, std::memory_order_acquire)) {
        set_reason(reason);
        return;
      }
  }
  [[nodiscard]] bool aborted() const { return state_->word.load(std::memory_order_acquire) & aborted_bit; }
  // Throws GroupAborted, naming the cause, when the group was aborted.
  void throw_if_aborted() {
    if (aborted()) throw_aborted();
  }

  // Makes an aborted rendezvous usable again. Only while no rank is inside a collective.
  void reset() {
    state_->word.store(0, std::memory_order_release);
    state_->reason_ready.store(0, std::memory_order_release);
    for (int r = 0; r < size_; ++r) slots_[std::size_t(r)].arrivals.store(0, std::memory_order_relaxed);
  }

  // Empty when every rank published the same call with sizes that fit it; otherwise what is
  // wrong, the same words on every rank (they all read the same table). Between two meetings.
  [[nodiscard]] std::string disagreement(CallDescriptor const& call, char const* who) const {
    bool same = true;
    for (int r = 0; r < size_; ++r) {
      CallDescriptor const& other = entry(r).call;
      same = same && other.same_call(call) && other.input == call.input && other.output == call.output;
    }
    std::string const problem = malformed(entry(0).call, size_);
    if (same && problem.empty()) return {};
    if (!same) return std::string(who) + ": " + detail::mismatch_report(size_, [&](int r) { return entry(r).call; });
    return std::string(who) + ": " + entry(0).call.describe() + ": " + problem;
  }

  // One collective: publish, meet, check that every rank called the same thing, run body(),
  // meet again. A mismatch throws on every rank after a second meeting, so that nobody
  // publishes the next call while a peer is still reading this one.
  template <class Body>
  void collective(int rank, Entry const& mine, char const* who, Body&& body) {
    publish(rank, mine);
    arrive_and_wait(rank, who);
    if (std::string const problem = disagreement(mine.call, who); !problem.empty()) {
      arrive_and_wait(rank, who);
      throw CommError(problem);
    }
    body();
    arrive_and_wait(rank, who);
  }

 private:
  // State::word: arrived count (bits 0-14), aborted flag (bit 15), generation (bits 16-31). One
  // word, so that arriving and aborting on timeout cannot both succeed.
  static constexpr std::uint32_t count_mask = 0x7fff;
  static constexpr std::uint32_t aborted_bit = 0x8000;
  static constexpr std::uint32_t generation_one = 0x10000;
  static constexpr std::uint32_t generation_mask = 0xffff0000;

  Rendezvous(int size, std::chrono::milliseconds timeout, State* state, Slot* slots, detail::Sharing sharing)
      : size_(size), timeout_(timeout), sharing_(sharing) {
    if (size < 1 || size > int(count_mask))
      throw ConfigError(strata::detail::message("Rendezvous: size ", size, " must be in 1..", count_mask));
    if (timeout.count() <= 0)
      throw ConfigError(strata::detail::message("Rendezvous: timeout ", timeout.count(), " ms must be positive"));
    if (!state) {
      owned_state_ = std::make_unique<State>();
      owned_slots_ = std::make_unique<Slot[]>(std::size_t(size));
      state = owned_state_.get();
      slots = owned_slots_.get();
    }
    state_ = state;
    slots_ = slots;
  }

  // Only the rank whose compare-exchange set the aborted bit writes the reason.
  void set_reason(std::string const& reason) {
    std::size_t const n = std::min(reason.size(), State::reason_capacity - 1);
    std::memcpy(state_->reason, reason.data(), n);
    state_->reason[n] = '\0';
    state_->reason_ready.store(1, std::memory_order_release);
    detail::wake_all(state_->word, sharing_);
  }

  [[noreturn]] void throw_aborted() {
    // The aborter is writing the reason; a process killed meanwhile never finishes it.
    auto const give_up = detail::Clock::now() + std::chrono::seconds(1);
    while (!state_->reason_ready.load(std::memory_order_acquire) && detail::Clock::now() < give_up) detail::cpu_relax();
    if (!state_->reason_ready.load(std::memory_order_acquire))
      throw GroupAborted("the communicator was aborted by a rank that ended before saying why");
    throw GroupAborted(std::string("the communicator was aborted: ") + state_->reason);
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
  detail::Sharing sharing_;
  std::unique_ptr<State> owned_state_;
  std::unique_ptr<Slot[]> owned_slots_;
  State* state_ = nullptr;
  Slot* slots_ = nullptr;
};

}  // namespace strata::comm
