#pragma once
// Strategy<Ps...>: the tf.distribute API for custom training loops.
//
//   strata::Strategy<strata::Mirrored<4>> strategy;
//   for (auto const& batch : strategy.distribute(train.batch(256))) {
//     auto losses = strategy.run([&](strata::ReplicaContext& ctx, strata::Shard const& shard) { ... }, batch);
//     float mean = strategy.reduce(strata::ReduceOp::mean, losses);
//   }
//
// Replicas are persistent threads owned by the strategy; run() hands each its shard.

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_group.hpp"
#include "strata/core/backend.hpp"
#include "strata/strategy/backend_for.hpp"
#include "strata/core/error.hpp"
#include "strata/data/batch.hpp"
#include "strata/policy/config.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/processes.hpp"
#include "strata/strategy/replica_context.hpp"
#include "strata/strategy/strategy_options.hpp"

namespace strata::strategy {

// One value per replica, the result of Strategy::run.
template <class T, int N>
struct PerReplica {
  std::array<T, N> values{};
  [[nodiscard]] T const& operator[](int replica) const { return values[std::size_t(replica)]; }
  [[nodiscard]] T& operator[](int replica) { return values[std::size_t(replica)]; }
  [[nodiscard]] static constexpr int size() { return N; }
};

// Strategies that run today; the others are parsed so the policy grammar is complete.
template <class Config>
inline constexpr bool strategy_is_available = Config::strategy::kind == policy::StrategyKind::one_device ||
                                              Config::strategy::kind == policy::StrategyKind::mirrored ||
                                              Config::strategy::kind == policy::StrategyKind::multi_worker_mirrored;

// Whether the program includes what a multi-process strategy runs on (strata/multi_worker.hpp).
template <class Strategy>
inline constexpr bool multi_worker_linked = false;

template <class Config>
class BasicStrategy {
  static_assert(strategy_is_available<Config>,
                "strata: this strategy is parsed but not implemented yet; OneDevice, Mirrored<N> and "
                "MultiWorkerMirrored<N> run today (see docs/roadmap.md)");
  static_assert(Config::strategy::kind != policy::StrategyKind::multi_worker_mirrored ||
                    multi_worker_linked<typename Config::strategy>,
                "strata::MultiWorkerMirrored needs #include <strata/multi_worker.hpp> and the strata::mpi CMake "
                "target (docs/multi_worker.md)");

 public:
  using config = Config;
  using backend = backend_for_t<typename Config::device>;
  static constexpr int num_replicas = Config::num_replicas;

  explicit BasicStrategy(StrategyOptions const& options = {})
      : group_(num_replicas, options.timeout), processes_(options) {}

  // Replicas in sync across the whole job: this process's times the processes.
  [[nodiscard]] int num_replicas_in_sync() const { return num_replicas * processes_.processes(); }

  // Batches of `batches` split across the replicas; throws ConfigError when the global batch
  // is smaller than the number of replicas.
  [[nodiscard]] DistributedDataset distribute(data::BatchedDataset const& batches) const {
    return {batches, num_replicas};
  }

  // Runs fn(ReplicaContext&, Shard const&) on every replica with its shard of `batch`.
  template <class F>
  auto run(F&& fn, DistributedBatch const& batch) {
    return run_replicas([&](ReplicaContext& context) { return fn(context, batch.shard(context.replica_id_in_sync_group())); });
  }

  // Runs fn(ReplicaContext&) on every replica.
  template <class F>
  auto run(F&& fn) {
    return run_replicas(std::forward<F>(fn));
  }

  // Combines per-replica values: sum, mean, max or min.
  template <class T>
  [[nodiscard]] T reduce(comm::ReduceOp op, PerReplica<T, num_replicas> const& values) const {
    T result = values[0];
    for (int r = 1; r < num_replicas; ++r) {
      if (op == comm::ReduceOp::max) result = std::max(result, values[r]);
      else if (op == comm::ReduceOp::min) result = std::min(result, values[r]);
      else result += values[r];
    }
    if (op == comm::ReduceOp::mean) result /= T(num_replicas);
    return result;
  }

  // Concatenates per-replica values in replica order (tf's gather along the batch axis):
  // matrices side by side as columns, scalars into a vector.
  template <class T>
  [[nodiscard]] auto gather(PerReplica<T, num_replicas> const& values) const {
    if constexpr (std::is_same_v<T, Matrix>) {
      Eigen::Index cols = 0;
      for (auto const& m : values.values) cols += m.cols();
      Matrix out(values[0].rows(), cols);
      cols = 0;
      for (auto const& m : values.values) {
        if (m.rows() != out.rows())
          throw ShapeError(strata::detail::message("gather: replicas returned matrices with ", out.rows(), " and ", m.rows(),
                                           " rows; gather concatenates columns of equal height"));
        out.middleCols(cols, m.cols()) = m;
        cols += m.cols();
      }
      return out;
    } else {
      return std::vector<T>(values.values.begin(), values.values.end());
    }
  }

  // The replica threads, for code (like the Trainer) that cooperates on shared buffers.
  [[nodiscard]] comm::ThreadGroup& group() { return group_; }
  // The job's processes: this one alone, or (MultiWorkerMirrored) those of the MPI job.
  using processes_type = typename processes_for<typename Config::strategy>::type;
  [[nodiscard]] processes_type& processes() { return processes_; }
  [[nodiscard]] processes_type const& processes() const { return processes_; }

 private:
  template <class F>
  auto run_replicas(F&& fn) {
    using Result = std::invoke_result_t<F&, ReplicaContext&>;
    if constexpr (std::is_void_v<Result>) {
      auto task = [&](int replica) {
        ReplicaContext context(group_, replica);
        fn(context);
      };
      group_.run(task);
    } else {
      PerReplica<Result, num_replicas> results;
      auto task = [&](int replica) {
        ReplicaContext context(group_, replica);
        results[replica] = fn(context);
      };
      group_.run(task);
      return results;
    }
  }

  comm::ThreadGroup group_;
  processes_type processes_;
};

}  // namespace strata::strategy
