#pragma once
// backend_for<Device>: the math backend of a device policy, chosen at compile time: the
// CpuBackend for strata::Cpu; strata/cuda.hpp adds the CudaBackend for strata::Cuda. Here,
// above core/ and policy/, so that neither of those includes the other.

#include "strata/core/backend.hpp"
#include "strata/policy/device.hpp"
#include "strata/policy/slot.hpp"

namespace strata {

template <class Device>
struct backend_for {
  static_assert(policy::dependent_false<Device>,
                "strata::Cuda needs #include <strata/cuda.hpp> and the strata::cuda CMake target (docs/gpu.md)");
};
template <>
struct backend_for<policy::Cpu> {
  using type = CpuBackend;
};

template <class Device>
using backend_for_t = typename backend_for<Device>::type;

}  // namespace strata
