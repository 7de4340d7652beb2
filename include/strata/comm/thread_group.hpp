#pragma once
// ThreadGroup: N persistent replica threads of one process (the caller is replica 0) and
// what they need to cooperate: a spin-then-block barrier and a table where each replica
// publishes the buffer it takes into a collective.
//
// A failure in one replica aborts the group: replicas waiting at a barrier wake and
// leave, and run() rethrows the first exception on the caller. Nothing hangs.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "strata/core/aligned_buffer.hpp"
#include "strata/core/error.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::comm {

namespace detail {
// Tells the core we are spinning (frees the sibling hyper-thread, saves power).
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Thrown inside a replica that was woken because another replica failed.
struct GroupAborted {};
}  // namespace detail

// The half-open range [begin, end) of an array that one replica owns in a reduce-scatter.
struct Slice {
  std::size_t begin = 0;
  std::size_t end = 0;
  [[nodiscard]] std::size_t size() const { return end - begin; }
};

// Splits [0, size) into `parts` consecutive slices that start on cache lines.
inline Slice owned_slice(std::size_t size, int parts, int part) {
  std::size_t const chunk = round_up_to_line((size + std::size_t(parts) - 1) / std::size_t(parts));
  std::size_t const begin = std::min(size, chunk * std::size_t(part));
  return {begin, std::min(size, begin + chunk)};
}

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), published_(std::size_t(size)), published_sizes_(std::size_t(size)) {
    if (size < 1) throw ConfigError(strata::detail::message("ThreadGroup: size ", size, " must be at least 1"));
    for (int rank = 1; rank < size; ++rank) workers_.emplace_back([this, rank] { work(rank); });
  }
  ThreadGroup(ThreadGroup const&) = delete;
  ThreadGroup& operator=(ThreadGroup const&) = delete;
  ~ThreadGroup() {
    shutting_down_.store(true, std::memory_order_release);
    dispatch_.fetch_add(1, std::memory_order_release);
    dispatch_.notify_all();
    for (auto& worker : workers_) worker.join();
  }

  [[nodiscard]] int size() const { return size_; }

  // Calls task(rank) on every replica, rank 0 on this thread; returns when all are done.
  // One indirect call per replica per run: the step inside is fully typed.
  template <class Task>
  void run(Task& task) {
    if (size_ == 1) {
      task(0);
      return;
    }
    task_ = &task;
    invoke_ = [](void* t, int rank) { (*static_cast<Task*>(t))(rank); };
    error_ = nullptr;
    aborted_.store(false, std::memory_order_relaxed);
    arrived_.store(0, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    dispatch_.fetch_add(1, std::memory_order_release);
    dispatch_.notify_all();
    execute(0);
    wait_until([&] { return finished_.load(std::memory_order_acquire) == size_ - 1; }, finished_);
    if (error_) std::rethrow_exception(error_);
  }

  // Every replica of the group waits here until all have arrived.
  void barrier() {
    if (size_ == 1) return;
    // Read the generation before the abort flag: an abort after this read bumps the generation and wakes us.
    std::uint32_t const generation = generation_.load();
    if (aborted_.load()) throw detail::GroupAborted{};
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == size_ - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      generation_.notify_all();
      return;
    }
    wait_until([&] { return generation_.load() != generation; }, generation_);
    if (aborted_.load()) throw detail::GroupAborted{};
  }

  // Publish this replica's buffer for a collective; read peers' after a barrier.
  void publish(int rank, float* data, std::size_t size) {
    published_[std::size_t(rank)] = data;
    published_sizes_[std::size_t(rank)] = size;
  }
  [[nodiscard]] float* const* peers() const { return published_.data(); }
  [[nodiscard]] std::size_t peer_size(int rank) const { return published_sizes_[std::size_t(rank)]; }

 private:
  void execute(int rank) {
    try {
      invoke_(task_, rank);
    } catch (detail::GroupAborted const&) {
      // another replica failed first; its exception is the one reported
    } catch (...) {
      {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      aborted_.store(true);
      generation_.fetch_add(1);  // wake replicas waiting at a barrier
      generation_.notify_all();
    }
  }

  void work(int rank) {
    std::uint32_t seen = 0;
    for (;;) {
      wait_until([&] { return dispatch_.load(std::memory_order_acquire) != seen; }, dispatch_);
      seen = dispatch_.load(std::memory_order_acquire);
      if (shutting_down_.load(std::memory_order_acquire)) return;
      execute(rank);
      finished_.fetch_add(1, std::memory_order_acq_rel);
      finished_.notify_all();
    }
  }

  // Spin briefly (replicas usually arrive within microseconds), then sleep in the kernel
  // so that more replicas than cores do not burn each other's time.
  template <class Ready, class Atomic>
  static void wait_until(Ready ready, Atomic& word) {
    for (int i = 0; i < 4096; ++i) {
      if (ready()) return;
      detail::cpu_relax();
    }
    for (;;) {
      auto const value = word.load(std::memory_order_acquire);
      if (ready()) return;
      word.wait(value, std::memory_order_acquire);
    }
  }

  int size_;
  std::vector<std::thread> workers_;
  std::vector<float*> published_;
  std::vector<std::size_t> published_sizes_;

  void* task_ = nullptr;
  void (*invoke_)(void*, int) = nullptr;
  std::exception_ptr error_;
  std::mutex error_mutex_;

  alignas(64) std::atomic<std::uint32_t> dispatch_{0};
  alignas(64) std::atomic<int> finished_{0};
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<std::uint32_t> generation_{0};
  alignas(64) std::atomic<bool> aborted_{false};
  std::atomic<bool> shutting_down_{false};
};

}  // namespace strata::comm
