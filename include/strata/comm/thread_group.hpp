#pragma once
// ThreadGroup: N persistent replica threads of one process (the caller is replica 0), and
// the Rendezvous their collectives meet at.
//
// A failure in one replica aborts the group: replicas waiting in a collective wake and
// leave, and run() rethrows the first exception on the caller. Nothing hangs.
//
// A group is also an intra-op team (core/intra_op.hpp): intra_op_team() lends its threads to
// one replica of another group, which binds it to that replica's thread for every task it
// runs (bind_intra_op).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "strata/comm/rendezvous.hpp"
#include "strata/comm/thread_communicator.hpp"
#include "strata/core/error.hpp"
#include "strata/core/intra_op.hpp"

namespace strata::comm {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size, std::chrono::milliseconds timeout = default_timeout)
      : size_(checked(size)), rendezvous_(size, timeout), teams_(std::size_t(size_), nullptr) {
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
  [[nodiscard]] Rendezvous& rendezvous() { return rendezvous_; }
  // Replica `rank`'s handle on the group's collectives.
  [[nodiscard]] ThreadCommunicator communicator(int rank) { return ThreadCommunicator(rendezvous_, rank); }

  // Calls task(rank) on every replica, rank 0 on this thread; returns when all are done.
  // One indirect call per replica per run: the step inside is fully typed.
  template <class Task>
  void run(Task& task) {
    if (size_ == 1) {
      IntraOpBinding const bound(teams_[0]);
      task(0);
      return;
    }
    task_ = &task;
    invoke_ = [](void* t, int rank) { (*static_cast<Task*>(t))(rank); };
    error_ = nullptr;
    rendezvous_.reset();
    finished_.store(0, std::memory_order_relaxed);
    dispatch_.fetch_add(1, std::memory_order_release);
    dispatch_.notify_all();
    execute(0);
    wait_until([&] { return finished_.load(std::memory_order_acquire) == size_ - 1; }, finished_);
    if (error_) std::rethrow_exception(error_);
  }

  // Replica `rank`'s tasks split their large operations over `team` (nullptr: none). The
  // team must outlive the group's runs.
  void bind_intra_op(int rank, IntraOpTeam const* team) { teams_.at(std::size_t(rank)) = team; }

  // This group's threads as an intra-op team: run(parts) calls the task on ranks [0, parts).
  [[nodiscard]] IntraOpTeam intra_op_team() {
    return {size_, this, [](void* owner, int parts, void* task, void (*invoke)(void*, int)) {
              auto some = [&](int rank) {
                if (rank < parts) invoke(task, rank);
              };
              static_cast<ThreadGroup*>(owner)->run(some);
            }};
  }

  // Replica `rank` waits here until all have arrived (CommError after the group's timeout).
  void barrier(int rank) {
    if (size_ == 1) return;
    rendezvous_.publish(rank, {});  // a timeout names this call a barrier
    rendezvous_.arrive_and_wait(rank, "ThreadGroup");
  }

 private:
  static int checked(int size) {
    if (size < 1) throw ConfigError(strata::detail::message("ThreadGroup: size ", size, " must be at least 1"));
    return size;
  }

  void execute(int rank) {
    try {
      IntraOpBinding const bound(teams_[std::size_t(rank)]);
      invoke_(task_, rank);
    } catch (GroupAborted const&) {
      // another replica failed first; its exception is the one reported
    } catch (...) {
      bool first = false;
      {
        std::lock_guard lock(error_mutex_);
        if (!error_) {
          error_ = std::current_exception();
          first = true;
        }
      }
      if (first) rendezvous_.abort(strata::detail::message("replica ", rank, " failed: ", describe(error_)));
    }
  }

  static std::string describe(std::exception_ptr const& error) {
    try {
      std::rethrow_exception(error);
    } catch (std::exception const& e) {
      return e.what();
    } catch (...) {
      return "an exception that is not a std::exception";
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

  // Between steps a worker may wait for a long time: spin briefly, then block without a deadline.
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
  Rendezvous rendezvous_;
  std::vector<std::thread> workers_;
  std::vector<IntraOpTeam const*> teams_;  // each rank's intra-op team, or nullptr

  void* task_ = nullptr;
  void (*invoke_)(void*, int) = nullptr;
  std::exception_ptr error_;
  std::mutex error_mutex_;

  alignas(64) std::atomic<std::uint32_t> dispatch_{0};
  alignas(64) std::atomic<int> finished_{0};
  std::atomic<bool> shutting_down_{false};
};

}  // namespace strata::comm
