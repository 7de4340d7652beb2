#pragma once
// Device policies: where a replica's math runs.

#include <string>

#include "strata/policy/slot.hpp"

namespace strata::policy {

struct Cpu {
  using policy_slot = device_slot;
  static std::string name() { return "Cpu"; }
};

// NVIDIA GPUs through cuBLAS and NCCL. Parsed today; the device backend is not built yet.
struct Cuda {
  using policy_slot = device_slot;
  static std::string name() { return "Cuda"; }
};

}  // namespace strata::policy
