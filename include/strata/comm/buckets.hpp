#pragma once
// Gradient buckets and the overlap of their all-reduce with the backward pass (the scheme
// that made PyTorch DDP and Horovod fast).
//
// BucketPlan groups a model's layers, last layer first (the order backward produces their
// gradients), into contiguous ranges of the parameter arena of at most `bucket_bytes` (a
// layer larger than that is a bucket of its own). BucketedAllReduce all-reduces a bucket as
// soon as backward reports its last layer done: inline, or on a communication thread while
// backward goes on with earlier layers. Buckets are reduced strictly in plan order on every
// rank, so every rank issues the same collectives in the same order.
//
// `Wire` is the type a bucket travels in: float, or bf16/fp16 (gradient compression, the
// policy Compress<T>): the bucket is rounded into a 16-bit buffer, all-reduced as 16-bit
// values (half the bytes) and widened back into the float arena.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "strata/comm/communicator.hpp"
#include "strata/comm/wait.hpp"
#include "strata/core/dtype.hpp"
#include "strata/core/error.hpp"

namespace strata::comm {

struct Bucket {
  std::size_t begin = 0;  // floats into the arena
  std::size_t end = 0;
  std::size_t first_layer = 0;  // layers [first_layer, last_layer] of the model
  std::size_t last_layer = 0;
  [[nodiscard]] std::size_t size() const { return end - begin; }
};

class BucketPlan {
 public:
  // `layer_offsets`: layer_count + 1 arena offsets (Sequential::offsets).
  BucketPlan(std::span<std::size_t const> layer_offsets, std::size_t bucket_bytes) {
    if (layer_offsets.size() < 2)
      throw ConfigError("BucketPlan: a model needs at least one layer (got " +
                        std::to_string(layer_offsets.size()) + " offsets)");
    if (bucket_bytes == 0) throw ConfigError("BucketPlan: bucket_bytes must be at least 1");
    std::size_t const layers = layer_offsets.size() - 1;
    bucket_of_layer_.resize(layers);
    std::size_t const limit = std::max<std::size_t>(1, bucket_bytes / sizeof(float));
    Bucket current{layer_offsets[layers], layer_offsets[layers], layers - 1, layers - 1};
    for (std::size_t l = layers; l-- > 0;) {
      std::size_t const size = layer_offsets[l + 1] - layer_offsets[l];
      if (current.size() > 0 && current.size() + size > limit) {
        buckets_.push_back(current);
        current = {layer_offsets[l + 1], layer_offsets[l + 1], l, l};
      }
      current.begin = layer_offsets[l];
      current.first_layer = l;
      bucket_of_layer_[l] = buckets_.size();
    }
    buckets_.push_back(current);
  }

  [[nodiscard]] std::span<Bucket const> buckets() const { return buckets_; }
  [[nodiscard]] std::size_t bucket_of_layer(std::size_t layer) const { return bucket_of_layer_[layer]; }

 private:
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_layer_;
};

enum class Overlap {
  after_backward,  // no overlap: finish() reduces every bucket
  in_backward,     // a bucket is reduced on the backward thread as soon as it is complete
  comm_thread,     // a bucket is handed to a communication thread; backward goes on
};

// One per replica. Per step: layer_done(l) for each layer as backward finishes it (from
// the last to the first), then finish(), which returns when every bucket is reduced.
template <Communicator Comm, class Wire = float>
  requires is_compute_type<Wire>
class BucketedAllReduce {
 public:
  using wire_type = Wire;

  BucketedAllReduce(Comm& comm, BucketPlan plan, std::span<float> gradients, ReduceOp op, Overlap overlap)
      : comm_(&comm), plan_(std::move(plan)), gradients_(gradients), op_(op), overlap_(overlap) {
    auto const buckets = plan_.buckets();
    if (!buckets.empty() && buckets.front().end > gradients.size())
      throw ConfigError(strata::detail::message("BucketedAllReduce: the plan covers ", buckets.front().end,
                                                " floats but the gradient arena has ", gradients.size()));
    if constexpr (compressed) {  // one bucket at a time is on the wire: the largest sizes the buffer
      std::size_t largest = 0;
      for (Bucket const& b : buckets) largest = std::max(largest, b.size());
      wire_.resize(largest);
    }
    if (overlap_ == Overlap::comm_thread) worker_ = std::thread([this] { communicate(); });
  }
  BucketedAllReduce(BucketedAllReduce const&) = delete;
  BucketedAllReduce& operator=(BucketedAllReduce const&) = delete;
  ~BucketedAllReduce() {
    if (worker_.joinable()) {
      stopping_.store(true, std::memory_order_release);
      issued_.fetch_add(1u << 30, std::memory_order_release);  // a changed word: no sleeper misses the news
      ready_.fetch_add(1u << 30, std::memory_order_release);
      wake(issued_);
      wake(ready_);
      worker_.join();
    }
  }

  [[nodiscard]] BucketPlan const& plan() const { return plan_; }

  // When each bucket's collective of the last finished step began and ended, for profiling
  // (profile/). Off by default: then reduce() reads no clock.
  struct Timing {
    std::chrono::steady_clock::time_point begin{}, end{};
  };
  void time_buckets(bool on) { timings_.assign(on ? plan_.buckets().size() : 0, Timing{}); }
  [[nodiscard]] std::span<Timing const> timings() const { return timings_; }

  void layer_done(std::size_t layer) {
    if (overlap_ == Overlap::after_backward) return;
    std::size_t const b = plan_.bucket_of_layer(layer);
    if (plan_.buckets()[b].first_layer != layer) return;  // the bucket's earliest layer completes it
    if (overlap_ == Overlap::in_backward) {
      reduce(b);
      return;
    }
    issued_.store(std::uint32_t(b + 1), std::memory_order_release);
    wake(issued_);
  }

  // Returns when every bucket of this step is reduced; rethrows a communication error.
  void finish() {
    std::size_t const count = plan_.buckets().size();
    if (overlap_ == Overlap::after_backward) {
      for (std::size_t b = 0; b < count; ++b) reduce(b);
    } else if (overlap_ == Overlap::comm_thread) {
      detail::wait_for(done_, [&](std::uint32_t d) { return d == count; }, detail::Clock::time_point::max());
      if (error_) {
        auto error = error_;
        error_ = nullptr;
        std::rethrow_exception(error);
      }
    }
    issued_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_release);
    ready_.fetch_add(1, std::memory_order_release);  // the worker may start on the next step
    wake(ready_);
  }

 private:
  static void wake(std::atomic<std::uint32_t>& word) { detail::wake_all(word); }

  static constexpr bool compressed = !std::is_same_v<Wire, float>;

  // The timings cover the collective alone, not the rounding into the wire type and back.
  void reduce(std::size_t b) {
    Bucket const& bucket = plan_.buckets()[b];
    std::span<float> const floats = gradients_.subspan(bucket.begin, bucket.size());
    auto const wire = [&] {
      if constexpr (compressed) return std::span<Wire>(wire_.data(), floats.size());
      else return floats;
    }();
    if constexpr (compressed) strata::store(wire.data(), floats.data(), floats.size());
    if (timings_.empty()) {
      comm_->all_reduce(wire, op_);
    } else {
      timings_[b].begin = std::chrono::steady_clock::now();
      comm_->all_reduce(wire, op_);
      timings_[b].end = std::chrono::steady_clock::now();
    }
    if constexpr (compressed) strata::load(floats.data(), wire.data(), floats.size());
  }

  // The communication thread: reduces buckets in plan order as backward issues them.
  void communicate() {
    std::size_t const count = plan_.buckets().size();
    std::uint32_t step = 0;
    for (;;) {
      for (std::size_t b = 0; b < count; ++b) {
        detail::wait_for(issued_, [&](std::uint32_t i) { return i > b || stopping_.load(std::memory_order_acquire); },
                         detail::Clock::time_point::max());
        if (stopping_.load(std::memory_order_acquire)) return;
        if (!error_) {
          try {
            reduce(b);
          } catch (...) {
            error_ = std::current_exception();  // finish() rethrows it
          }
        }
        done_.store(std::uint32_t(b + 1), std::memory_order_release);
        wake(done_);
      }
      ++step;
      detail::wait_for(ready_, [&](std::uint32_t r) { return r == step || stopping_.load(std::memory_order_acquire); },
                       detail::Clock::time_point::max());
      if (stopping_.load(std::memory_order_acquire)) return;
    }
  }

  Comm* comm_;
  BucketPlan plan_;
  std::span<float> gradients_;
  ReduceOp op_;
  Overlap overlap_;
  std::thread worker_;
  std::exception_ptr error_;
  std::vector<Timing> timings_;  // written by whichever thread reduces; read after finish()
  std::vector<Wire> wire_;       // compressed: the bucket on the wire (empty for float)
  alignas(64) std::atomic<std::uint32_t> issued_{0};  // buckets backward has completed this step
  alignas(64) std::atomic<std::uint32_t> done_{0};    // buckets reduced this step
  alignas(64) std::atomic<std::uint32_t> ready_{0};   // steps finished
  std::atomic<bool> stopping_{false};
};

}  // namespace strata::comm
