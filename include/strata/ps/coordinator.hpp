#pragma once
// ps::Coordinator: TensorFlow's ClusterCoordinator for strata's workers. schedule(fn) queues
// a step and returns at once with a RemoteValue; a free worker runs fn(worker, step) with the
// step's number (0, 1, 2, ... in the order scheduled); join() waits for every scheduled step
// and rethrows the first failure. fetch() on a RemoteValue waits for its step alone.
//
// The staleness bound S also gates dispatch: step k starts only when every step before
// k - S has finished. S = 0 is synchronous (one step at a time, in order: the same updates
// as one replica on the same batches); a larger S lets up to S + 1 steps, and no more than
// the workers, compute at once. The servers enforce the bound again on each push (a worker
// cannot apply a gradient more than S updates old), since steps finish in any order.
//
// A step that throws fails its RemoteValue, cancels the steps queued after it (their
// RemoteValues say so) and is rethrown by join().

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <span>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::ps {

// The future result of a scheduled step (TensorFlow's RemoteValue).
template <class T>
class RemoteValue {
 public:
  RemoteValue() = default;
  explicit RemoteValue(std::shared_future<T> future) : future_(std::move(future)) {}
  // Waits for the step; returns its result or throws its error.
  decltype(auto) fetch() const { return future_.get(); }
  [[nodiscard]] bool ready() const {
    return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

 private:
  std::shared_future<T> future_;
};

struct CoordinatorOptions {
  int staleness = 0;    // S: step k waits for every step before k - S
  int max_queued = 0;   // schedule() blocks while this many steps wait (0: twice the workers)
};

template <class Worker>
class Coordinator {
 public:
  Coordinator(std::span<Worker* const> workers, CoordinatorOptions options = {})
      : options_(options) {
    if (workers.empty()) throw ConfigError("ps::Coordinator: no workers to schedule steps on");
    if (options.staleness < 0)
      throw ConfigError(strata::detail::message("ps::Coordinator: staleness ", options.staleness,
                                                " must be >= 0 (0: synchronous)"));
    if (options_.max_queued <= 0) options_.max_queued = 2 * int(workers.size());
    for (Worker* w : workers) threads_.emplace_back([this, w] { run(*w); });
  }
  Coordinator(Coordinator const&) = delete;
  Coordinator& operator=(Coordinator const&) = delete;
  ~Coordinator() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      cancel_queued(std::make_exception_ptr(CommError("ps::Coordinator: destroyed before the step ran")));
    }
    changed_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Queues fn(Worker&, step) and returns its RemoteValue.
  template <class F>
  auto schedule(F fn) -> RemoteValue<std::invoke_result_t<F&, Worker&, std::int64_t>> {
    using R = std::invoke_result_t<F&, Worker&, std::int64_t>;
    auto promise = std::make_shared<std::promise<R>>();
    RemoteValue<R> value(promise->get_future().share());
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return int(queue_.size()) < options_.max_queued || failure_; });
    std::int64_t const step = next_step_++;
    if (failure_) {  // after a failure nothing more runs; join() reports it
      promise->set_exception(std::make_exception_ptr(CommError("ps::Coordinator: not run, an earlier step failed")));
      finished(step);
      return value;
    }
    queue_.push_back({step, [fn = std::move(fn), promise](Worker& w, std::int64_t s) mutable {
                        if constexpr (std::is_void_v<R>) {
                          fn(w, s);
                          promise->set_value();
                        } else {
                          promise->set_value(fn(w, s));
                        }
                      },
                      [promise](std::exception_ptr e) { promise->set_exception(e); }});
    lock.unlock();
    changed_.notify_all();
    return value;
  }

  // Waits until every scheduled step has finished; rethrows the first failure (once).
  void join() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return done_prefix_ == next_step_; });
    if (failure_) {
      auto e = std::exchange(failure_, nullptr);
      std::rethrow_exception(e);
    }
  }

  [[nodiscard]] std::int64_t steps_scheduled() const {
    std::lock_guard lock(mutex_);
    return next_step_;
  }

 private:
  struct Task {
    std::int64_t step;
    std::function<void(Worker&, std::int64_t)> run;
    std::function<void(std::exception_ptr)> fail;
  };

  void run(Worker& worker) {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] {
        return stopping_ || (!queue_.empty() && queue_.front().step - options_.staleness <= done_prefix_);
      });
      if (queue_.empty()) return;  // stopping, nothing left
      Task task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      changed_.notify_all();  // room in the queue
      std::exception_ptr error;
      try {
        task.run(worker, task.step);
      } catch (...) {
        error = std::current_exception();
        task.fail(error);
      }
      lock.lock();
      if (error && !failure_) {
        failure_ = error;
        cancel_queued(std::make_exception_ptr(CommError("ps::Coordinator: not run, an earlier step failed")));
      }
      finished(task.step);
      changed_.notify_all();
    }
  }

  // Marks `step` done and advances the prefix of finished steps. Holds the lock.
  void finished(std::int64_t step) {
    done_.push_back(step);
    for (bool moved = true; moved;) {
      moved = false;
      for (std::size_t i = 0; i < done_.size(); ++i)
        if (done_[i] == done_prefix_) {
          ++done_prefix_;
          done_[i] = done_.back();
          done_.pop_back();
          moved = true;
          break;
        }
    }
  }
  void cancel_queued(std::exception_ptr why) {
    for (auto& task : queue_) {
      task.fail(why);
      finished(task.step);
    }
    queue_.clear();
  }

  CoordinatorOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Task> queue_;
  std::vector<std::int64_t> done_;  // finished steps past the prefix
  std::int64_t next_step_ = 0;
  std::int64_t done_prefix_ = 0;    // every step below it has finished
  std::exception_ptr failure_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;  // last: started once everything above exists
};

}  // namespace strata::ps
