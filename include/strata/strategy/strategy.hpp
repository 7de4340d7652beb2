#pragma once
// Strategy<Ps...>: the tf.distribute API for custom training loops.
//
//   strata::Strategy<strata::Mirrored<4>> strategy;
//   for (auto const& batch : strategy.distribute(train.batch(256))) {
//     auto losses = strategy.run([&](auto& ctx, strata::Shard const& shard) { ... }, batch);
//     float mean = strategy.reduce(strata::ReduceOp::mean, losses);
//   }
//
// Replicas are persistent threads owned by the strategy; run() hands each its shard.
// Under MultiWorkerMirrored the same calls span every process of the MPI job: distribute
// splits each global batch over all replicas, the context's collectives and reduce and
// gather cross processes, and every process must make the same calls in the same order.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/comm/reduce_op.hpp"
#include "strata/comm/thread_group.hpp"
#include "strata/core/backend.hpp"
#include "strata/strategy/backend_for.hpp"
#include "strata/core/error.hpp"
#include "strata/core/intra_op.hpp"
#include "strata/data/batch.hpp"
#include "strata/policy/config.hpp"
#include "strata/profile/probe.hpp"
#include "strata/strategy/distribute.hpp"
#include "strata/strategy/epoch_input.hpp"
#include "strata/strategy/worker_input.hpp"
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

// Whether the program includes what a multi-process strategy runs on (strata/multi_worker.hpp).
template <class Strategy>
inline constexpr bool multi_worker_linked = false;

template <class Config>
class BasicStrategy {
  static_assert(Config::strategy::kind != policy::StrategyKind::multi_worker_mirrored ||
                    multi_worker_linked<typename Config::strategy>,
                "strata::MultiWorkerMirrored needs #include <strata/multi_worker.hpp> and the strata::mpi CMake "
                "target (docs/multi_worker.md)");
  static_assert(Config::strategy::kind != policy::StrategyKind::parameter_server,
                "strata::ParameterServer trains through Trainer with #include <strata/ps.hpp> and the strata::ps "
                "CMake target; it has no Strategy for custom loops (schedule steps on ps::LocalCluster's coordinator "
                "instead; docs/parameter_server.md)");
  using communicator_for = replica_communicator_for<typename Config::strategy>;

 public:
  using config = Config;
  using backend = backend_for_t<typename Config::device>;
  static constexpr int num_replicas = Config::num_replicas;  // in this process
  using processes_type = typename processes_for<typename Config::strategy>::type;
  using communicator_type = typename communicator_for::type;
  // What the function given to run() receives.
  using context_type = BasicReplicaContext<communicator_type>;

  explicit BasicStrategy(StrategyOptions const& options = {})
      : options_(options), intra_op_threads_(intra_op_threads_for(options)), group_(num_replicas, options.timeout),
        processes_(options) {
    if (intra_op_threads_ < 2) return;
    for (int r = 0; r < num_replicas; ++r) intra_op_groups_.push_back(std::make_unique<comm::ThreadGroup>(intra_op_threads_));
    for (auto& g : intra_op_groups_) intra_op_teams_.push_back(g->intra_op_team());
    for (int r = 0; r < num_replicas; ++r) group_.bind_intra_op(r, &intra_op_teams_[std::size_t(r)]);
  }

  // Threads each replica's large CPU operations split over, itself included (StrategyOptions).
  [[nodiscard]] int intra_op_threads() const { return intra_op_threads_; }

  // Replicas in sync across the whole job: this process's times the processes.
  [[nodiscard]] int num_replicas_in_sync() const { return num_replicas * processes_.processes(); }
  // The job-wide index of this process's first replica.
  [[nodiscard]] int first_replica() const { return num_replicas * processes_.process(); }

  // Batches of `batches` split across every replica of the job (each process reads the same
  // global batches and its replicas take their shards); throws ConfigError when the global
  // batch is smaller than the replicas in sync.
  [[nodiscard]] DistributedDataset distribute(data::BatchedDataset const& batches) const {
    return {batches, num_replicas_in_sync()};
  }

  // tf's distribute_datasets_from_function: make(InputContext const&) returns this worker's
  // Dataset, read in local batches of global_batch_size / workers, each split over this
  // process's replicas (shards know their place in the step's global batch). Every worker
  // iterates as many steps per epoch as the one with the most data needs, the others with
  // empty batches. Collective: every process calls it; if any worker's `make` throws or
  // returns no data, every worker throws that worker's error.
  template <class Make>
  [[nodiscard]] WorkerDistributedDataset distribute_datasets_from_function(Make&& make, int global_batch_size) {
    return {worker_input("distribute_datasets_from_function", make, [](data::Dataset const&) {}, global_batch_size,
                         false, 0, 1),
            num_replicas_in_sync(), num_replicas, first_replica()};
  }

  // This worker's input when every worker reads its own data (distribute_datasets_from_function,
  // Trainer::fit with PerWorker): make(InputContext) gives the Dataset, check(dataset) vets it
  // (throwing), and the workers learn each other's sizes. Collective; a failure on any worker
  // is every worker's (agree).
  template <class Make, class Check>
  [[nodiscard]] WorkerInput worker_input(char const* who, Make& make, Check&& check, int global_batch_size,
                                         bool shuffle, std::uint64_t seed, int prefetch) {
    InputContext const context{processes_.processes(), processes_.process(), num_replicas_in_sync()};
    int const local_batch = context.per_worker_batch_size(global_batch_size);
    data::Dataset local;
    agree([&] {
      local = make(context);
      if (local.empty())
        throw DataError(strata::detail::message(who, ": the input function gave worker ", context.input_pipeline_id,
                                                " an empty dataset; every worker needs at least one sample"));
      check(local);
      return false;
    });
    std::vector<std::int64_t> sizes(std::size_t(processes_.processes()));
    std::int64_t const mine = std::int64_t(local.size());
    processes_.all_gather(std::as_bytes(std::span<std::int64_t const>(&mine, 1)),
                          std::as_writable_bytes(std::span<std::int64_t>(sizes)));
    return WorkerInput(local, std::move(sizes), context.input_pipeline_id, local_batch, shuffle, seed, prefetch);
  }

  // Runs `hook` (returns whether to stop) on every process, which then agree on the outcome:
  // when one throws, every one throws that error (the lowest failing process's: the chief's,
  // when it fails to write), and when one asks to stop, all stop. Collective.
  template <class Hook>
  bool agree(Hook&& hook) {
    if (processes_.processes() == 1) return hook();
    bool stop = false;
    std::exception_ptr failure;
    std::string text;
    try {
      stop = hook();
    } catch (std::exception const& e) {
      failure = std::current_exception();
      text = std::to_string(int(strata::detail::kind_of(e))) + ":" + e.what();
    }
    int outcome[2] = {failure ? processes_.process() : processes_.processes(), stop ? 0 : 1};
    processes_.min(std::span<int>(outcome));
    if (outcome[0] < processes_.processes()) {
      processes_.broadcast(text, outcome[0]);
      if (failure) std::rethrow_exception(failure);  // a process that failed throws its own
      std::size_t const colon = text.find(':');
      strata::detail::throw_error(strata::detail::ErrorKind(std::stoi(text.substr(0, colon))), text.substr(colon + 1));
    }
    return outcome[1] == 0;
  }

  // Runs fn(context_type&, Shard const&) on every replica with its shard of `batch`.
  template <class F>
  auto run(F&& fn, DistributedBatch const& batch) {
    if (batch.num_replicas() != num_replicas_in_sync())
      throw ConfigError(strata::detail::message("Strategy::run: the batch is split for ", batch.num_replicas(),
                                                " replicas but ", num_replicas_in_sync(),
                                                " are in sync; split it with this strategy's distribute()"));
    return run_replicas([&](context_type& context) { return fn(context, batch.shard(context.replica_id_in_sync_group())); });
  }

  // Runs fn(context_type&) on every replica.
  template <class F>
  auto run(F&& fn) {
    return run_replicas(std::forward<F>(fn));
  }

  // Combines per-replica values over every replica of the job: sum, mean, max or min of an
  // arithmetic type (across processes, combined in double, in process order).
  template <class T>
  [[nodiscard]] T reduce(comm::ReduceOp op, PerReplica<T, num_replicas> const& values) {
    T result = values[0];
    for (int r = 1; r < num_replicas; ++r) {
      if (op == comm::ReduceOp::max) result = std::max(result, values[r]);
      else if (op == comm::ReduceOp::min) result = std::min(result, values[r]);
      else result += values[r];
    }
    if (processes_.processes() > 1) result = across_processes(op, result);
    if (op == comm::ReduceOp::mean) result /= T(num_replicas_in_sync());
    return result;
  }

  // Concatenates per-replica values in replica order over the job (tf's gather along the
  // batch axis): matrices side by side as columns, scalars into a vector.
  template <class T>
  [[nodiscard]] auto gather(PerReplica<T, num_replicas> const& values) {
    if constexpr (std::is_same_v<T, Matrix>) {
      Eigen::Index cols = 0;
      for (auto const& m : values.values) cols += m.cols();
      Matrix mine(values[0].rows(), cols);
      cols = 0;
      for (auto const& m : values.values) {
        if (m.rows() != mine.rows())
          throw ShapeError(strata::detail::message("gather: replicas returned matrices with ", mine.rows(), " and ",
                                                   m.rows(), " rows; gather concatenates columns of equal height"));
        mine.middleCols(cols, m.cols()) = m;
        cols += m.cols();
      }
      return processes_.processes() == 1 ? mine : gather_columns(mine);
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "Strategy::gather: T must be a Matrix or trivially copyable");
      std::vector<T> all(static_cast<std::size_t>(num_replicas_in_sync()));
      processes_.all_gather(std::as_bytes(std::span<T const>(values.values)), std::as_writable_bytes(std::span<T>(all)));
      return all;
    }
  }

  // Times every replica's function in run() with `probe` (nullptr: untimed); what a
  // profile::LoopProfiler does while it lives.
  void attach_probe(profile::Probe<num_replicas>* probe) { probe_ = probe; }
  [[nodiscard]] bool probe_attached() const { return probe_ != nullptr; }

  // The replica threads, for code (like the Trainer) that cooperates on shared buffers.
  [[nodiscard]] comm::ThreadGroup& group() { return group_; }
  // The job's processes: this one alone, or (MultiWorkerMirrored) those of the MPI job.
  [[nodiscard]] processes_type& processes() { return processes_; }
  [[nodiscard]] processes_type const& processes() const { return processes_; }

 private:
  template <class F>
  auto run_replicas(F&& fn) {
    make_communicators();
    using Result = std::invoke_result_t<F&, context_type&>;
    // A replica's function, timed when a probe is attached, and its context's collectives.
    auto timed = [&](int replica, context_type& context, auto&& call) {
      if (!probe_) return call();
      context.time_collectives(probe_->timer(replica));
      auto const begin = probe_->now();
      struct Record {  // also when the function throws
        profile::Probe<num_replicas>* probe;
        int replica;
        std::int64_t begin;
        ~Record() { probe->record(replica, profile::Phase::run, begin, probe->now()); }
      } const record{probe_, replica, begin};
      return call();
    };
    if constexpr (std::is_void_v<Result>) {
      auto task = [&](int replica) {
        context_type context(communicators_[std::size_t(replica)], replica, num_replicas);
        timed(replica, context, [&] { fn(context); });
      };
      group_.run(task);
    } else {
      PerReplica<Result, num_replicas> results;
      auto task = [&](int replica) {
        context_type context(communicators_[std::size_t(replica)], replica, num_replicas);
        timed(replica, context, [&] { results[replica] = fn(context); });
      };
      group_.run(task);
      return results;
    }
  }

  // On the first run: made here, in replica order, because making one may be collective
  // across processes (every process calls run() in the same order).
  void make_communicators() {
    if (!communicators_.empty()) return;
    communicators_.reserve(num_replicas);
    for (int r = 0; r < num_replicas; ++r) communicators_.push_back(communicator_for::make(group_.communicator(r), options_));
  }

  template <class T>
  T across_processes(comm::ReduceOp op, T const& mine) {
    static_assert(std::is_arithmetic_v<T>, "Strategy::reduce across processes: T must be an arithmetic type");
    double x = double(mine);
    std::span<double> one(&x, 1);
    if (op == comm::ReduceOp::max) processes_.max(one);
    else if (op == comm::ReduceOp::min) processes_.min(one);
    else processes_.sum(one);
    return T(x);
  }

  // Every process's columns, in process order: each fills its own, zeros elsewhere, summed.
  Matrix gather_columns(Matrix const& mine) {
    std::vector<std::int64_t> cols(std::size_t(processes_.processes()));
    std::int64_t const my_cols = mine.cols();
    processes_.all_gather(std::as_bytes(std::span<std::int64_t const>(&my_cols, 1)),
                          std::as_writable_bytes(std::span<std::int64_t>(cols)));
    check_same_rows(mine.rows());
    std::int64_t before = 0, total = 0;
    for (int p = 0; p < processes_.processes(); ++p) {
      if (p < processes_.process()) before += cols[std::size_t(p)];
      total += cols[std::size_t(p)];
    }
    Matrix all = Matrix::Zero(mine.rows(), Eigen::Index(total));
    all.middleCols(Eigen::Index(before), mine.cols()) = mine;
    processes_.sum(std::span<float>(all.data(), std::size_t(all.size())));
    return all;
  }

  void check_same_rows(Eigen::Index rows) {
    double high = double(rows), low = double(rows);
    processes_.max(std::span<double>(&high, 1));
    processes_.min(std::span<double>(&low, 1));
    if (high != low)
      throw ShapeError(strata::detail::message("Strategy::gather: process ", processes_.process(), " has matrices of ",
                                               rows, " rows but others have between ", low, " and ", high,
                                               "; gather concatenates columns of equal height"));
  }

  // StrategyOptions::intra_op_threads, resolved: automatic only where every replica of the
  // job is a thread of this process on the CPU (another process's threads are not counted).
  static int intra_op_threads_for(StrategyOptions const& options) {
    if (options.intra_op_threads < 0)
      throw ConfigError(strata::detail::message("StrategyOptions: intra_op_threads ", options.intra_op_threads,
                                                " must be >= 0 (0: automatic, 1: none)"));
    if (!std::is_same_v<typename Config::device, policy::Cpu>) return 1;
    if (options.intra_op_threads > 0) return options.intra_op_threads;
    constexpr auto kind = Config::strategy::kind;
    bool const in_process = kind == policy::StrategyKind::one_device || kind == policy::StrategyKind::mirrored ||
                            kind == policy::StrategyKind::central_storage;
    return in_process ? std::max(1, available_cores() / num_replicas) : 1;
  }

  StrategyOptions options_;
  int intra_op_threads_;
  // Declared before the replica threads' group, so they outlive it.
  std::vector<std::unique_ptr<comm::ThreadGroup>> intra_op_groups_;
  std::vector<IntraOpTeam> intra_op_teams_;
  comm::ThreadGroup group_;
  processes_type processes_;
  std::vector<communicator_type> communicators_;
  profile::Probe<num_replicas>* probe_ = nullptr;
};

}  // namespace strata::strategy
