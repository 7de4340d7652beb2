#pragma once
// Strategy policies: how many replicas, and where they live.

#include <string>

#include "strata/policy/slot.hpp"

namespace strata::policy {

// Kinds let the trainer branch with `if constexpr` on what a strategy is.
enum class StrategyKind { one_device, mirrored, multi_worker_mirrored, central_storage, parameter_server };

// One replica: the reference every other strategy is tested against.
struct OneDevice {
  using policy_slot = strategy_slot;
  static constexpr StrategyKind kind = StrategyKind::one_device;
  static constexpr int replicas = 1;
  static std::string name() { return "OneDevice"; }
};

// N synchronous replicas in one process (threads on Cpu, GPUs on Cuda).
template <int N>
struct Mirrored {
  static_assert(N >= 1, "strata::Mirrored<N>: N must be at least 1 (the number of replicas in sync)");
  using policy_slot = strategy_slot;
  static constexpr StrategyKind kind = StrategyKind::mirrored;
  static constexpr int replicas = N;
  static std::string name() { return "Mirrored<" + std::to_string(N) + ">"; }
};

// Mirrored inside each process, processes joined by MPI/NCCL.
template <int LocalN>
struct MultiWorkerMirrored {
  static_assert(LocalN >= 1, "strata::MultiWorkerMirrored<LocalN>: LocalN must be at least 1 (replicas per process)");
  using policy_slot = strategy_slot;
  static constexpr StrategyKind kind = StrategyKind::multi_worker_mirrored;
  static constexpr int local_replicas = LocalN;
  static constexpr int replicas = LocalN;  // per process; the world size is known at run time
  static std::string name() { return "MultiWorkerMirrored<" + std::to_string(LocalN) + ">"; }
};

// One central copy of the variables, N compute replicas.
template <int N>
struct CentralStorage {
  static_assert(N >= 1, "strata::CentralStorage<N>: N must be at least 1 (compute replicas)");
  using policy_slot = strategy_slot;
  static constexpr StrategyKind kind = StrategyKind::central_storage;
  static constexpr int replicas = N;
  static std::string name() { return "CentralStorage<" + std::to_string(N) + ">"; }
};

// Variables sharded over Servers, Workers computing asynchronously.
template <int Workers, int Servers>
struct ParameterServer {
  static_assert(Workers >= 1, "strata::ParameterServer<Workers, Servers>: Workers must be at least 1");
  static_assert(Servers >= 1, "strata::ParameterServer<Workers, Servers>: Servers must be at least 1");
  using policy_slot = strategy_slot;
  static constexpr StrategyKind kind = StrategyKind::parameter_server;
  static constexpr int workers = Workers;
  static constexpr int servers = Servers;
  static constexpr int replicas = Workers;
  static std::string name() {
    return "ParameterServer<" + std::to_string(Workers) + ", " + std::to_string(Servers) + ">";
  }
};

}  // namespace strata::policy
