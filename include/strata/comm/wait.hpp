#pragma once
// Waiting on a 32-bit atomic word with a deadline: spin briefly (peers usually arrive within
// microseconds), then sleep in the kernel (Linux futex) so that more threads than cores do
// not burn each other's time. std::atomic::wait has no timeout, which a collective needs,
// and waits only within a process; a word in memory that processes share (ShmCommunicator)
// takes Sharing::processes.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::comm::detail {

using Clock = std::chrono::steady_clock;

// Who waits on a word: threads of this process (the kernel's cheaper private futex), or
// processes that map the same shared memory.
enum class Sharing : bool { threads, processes };

// Tells the core we are spinning (frees the sibling hyper-thread, saves power).
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Sleeps while `word` still holds `expected`, at most until `deadline`; may wake early.
inline void sleep_while_equal(std::atomic<std::uint32_t>& word, std::uint32_t expected, Clock::time_point deadline,
                              Sharing sharing = Sharing::threads) {
  auto const left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return;
#if defined(__linux__)
  auto const ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec timeout{static_cast<std::time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  int const op = sharing == Sharing::threads ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT;
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op, expected, &timeout, nullptr, 0);
#else
  (void)sharing;
  if (word.load(std::memory_order_acquire) == expected)
    std::this_thread::sleep_for(std::min<Clock::duration>(left, std::chrono::microseconds(50)));
#endif
}

// Wakes every thread sleeping on `word` in sleep_while_equal.
inline void wake_all(std::atomic<std::uint32_t>& word, Sharing sharing = Sharing::threads) {
#if defined(__linux__)
  int const op = sharing == Sharing::threads ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE;
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op, 0x7fffffff, nullptr, nullptr, 0);
#else
  (void)word;
  (void)sharing;
#endif
}

// How long to spin before sleeping: long when every waiter has a core of its own (peers
// arrive within microseconds), short when threads outnumber cores (a spinning waiter then
// takes the core a peer needs to arrive).
inline int spin_budget(int threads) {
  static int const cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return threads <= cores ? 4096 : 32;
}

// Returns true once done(value of word) holds; false if the deadline passes first.
template <class Done>
bool wait_for(std::atomic<std::uint32_t>& word, Done done, Clock::time_point deadline, int spins = 4096,
              Sharing sharing = Sharing::threads) {
  for (int i = 0; i < spins; ++i) {
    if (done(word.load(std::memory_order_acquire))) return true;
    cpu_relax();
  }
  for (;;) {
    std::uint32_t const value = word.load(std::memory_order_acquire);
    if (done(value)) return true;
    if (Clock::now() >= deadline) return false;
    sleep_while_equal(word, value, deadline, sharing);
  }
}

}  // namespace strata::comm::detail
