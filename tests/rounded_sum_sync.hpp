#pragma once
// The oracle of Compress<T>'s gradient sync, written plainly and in one thread: every
// replica's gradient rounded to T, the rounded values summed in fp32 in replica order, the
// sum rounded to T and read by every replica. A CommunicatorSync whose buckets cross as T over
// strata's own engines (which accumulate in fp32 and round once) must match it bit for bit.
// `Group` < Replicas: replicas are processes' threads, Group per process, reduced among
// themselves first (a rounded sum per process) and then across the processes, in order.

#include <cstddef>
#include <span>

#include "strata/comm/thread_group.hpp"
#include "strata/train/gradient_sync.hpp"

template <class T, int Replicas, int Group = Replicas>
  requires(Replicas % Group == 0)
class RoundedSumSync : public strata::train::ReplicaArenas<Replicas> {
  using base = strata::train::ReplicaArenas<Replicas>;

 public:
  using wire_type = T;

  RoundedSumSync(strata::comm::ThreadGroup& group, std::span<float> model_gradients, std::span<std::size_t const>)
      : base(group, model_gradients) {}

  void begin_reduction(bool) {}
  void layer_done(int, std::size_t) {}
  void gradients_ready(int r) {
    this->barrier(r);
    if (r == 0) {
      auto rounded = [&](int q, std::size_t i) { return float(T(this->gradients_[std::size_t(q)][i])); };
      for (std::size_t i = 0; i < this->arena_; ++i) {
        float total = 0.0f;
        for (int first = 0; first < Replicas; first += Group) {
          float group = rounded(first, i);
          for (int q = first + 1; q < first + Group; ++q) group += rounded(q, i);
          total = first == 0 ? float(T(group)) : total + float(T(group));
        }
        for (int q = 0; q < Replicas; ++q) this->gradients_[std::size_t(q)][i] = float(T(total));
      }
    }
    this->barrier(r);
  }
  [[nodiscard]] std::span<float const* const> summands(int r) const {
    return std::span<float const* const>(this->gradients_).subspan(std::size_t(r), 1);
  }
  [[nodiscard]] static constexpr int num_replicas_in_sync() { return Replicas; }
};
