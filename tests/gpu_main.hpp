#pragma once
// The main of the GPU test programs (test_nccl, test_cuda): without `--gpu` it runs the
// cases that need no GPU; with `--gpu` it runs the "gpu:" cases, or exits 77 (CTest:
// skipped, not passed) where there is no GPU. A watchdog ends a hung run with exit 3.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <vector>

#include "strata/cuda/runtime.hpp"

inline int gpu_test_main(int argc, char** argv, char const* what, unsigned watchdog_seconds) {
  bool gpu = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gpu") == 0) gpu = true;
    else args.push_back(argv[i]);
  }
  if (gpu && strata::cuda::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device here (cudaGetDeviceCount found none); the %s tests run on a GPU machine "
                "(scripts/gpu-check)\n", what);
    return 77;
  }
  signal(SIGALRM, [](int) {
    constexpr char text[] = "watchdog fired: a GPU test hung\n";
    (void)!write(2, text, sizeof text - 1);
    _exit(3);
  });
  alarm(watchdog_seconds);
  doctest::Context context(int(args.size()), args.data());
  context.addFilter(gpu ? "test-case" : "test-case-exclude", "gpu:*");
  return context.run();
}
