#pragma once
// Device policies: where a replica's math runs.

#include "strata/policy/slot.hpp"

namespace strata::policy {

struct Cpu {
  using policy_slot = device_slot;
  static constexpr char const* name = "Cpu";
};

// NVIDIA GPUs through cuBLAS and NCCL. Parsed today; the device backend is not built yet.
struct Cuda {
  using policy_slot = device_slot;
  static constexpr char const* name = "Cuda";
};

}  // namespace strata::policy
