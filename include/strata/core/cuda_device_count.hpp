#pragma once
// The number of CUDA devices this process sees, asked of the CUDA runtime: what the device
// layer (cuda/) and the NCCL communicator (comm/) both need, below both of them. Needs the
// CUDA toolkit's headers; only GPU code includes it.

#include <cuda_runtime.h>

namespace strata {

// 0 where there is no GPU or no driver.
inline int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

}  // namespace strata
