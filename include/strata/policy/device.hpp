#pragma once
// Device policies: where a replica's math runs.

#include <string>

#include "strata/policy/slot.hpp"

namespace strata::policy {

struct Cpu {
  using policy_slot = device_slot;
  static std::string name() { return "Cpu"; }
};

// NVIDIA GPUs: cuBLAS GEMMs and NVRTC-compiled kernels (<strata/cuda.hpp>, docs/gpu.md).
struct Cuda {
  using policy_slot = device_slot;
  static std::string name() { return "Cuda"; }
};

}  // namespace strata::policy
