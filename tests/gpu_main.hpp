#pragma once
// The main of the GPU test programs (test_nccl, test_cuda): without a flag it runs the
// cases that need no GPU; `--gpu` runs the "gpu:" cases and `--gpus 2` the "gpus2:" cases,
// or exits 77 (CTest: skipped, not passed) where there are fewer GPUs. A watchdog ends a
// hung run with exit 3.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>

#include "strata/cuda/runtime.hpp"

inline int gpu_test_main(int argc, char** argv, char const* what, unsigned watchdog_seconds) {
  int gpus = 0;  // GPUs the selected cases need
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gpu") == 0) gpus = 1;
    else if (std::strcmp(argv[i], "--gpus") == 0 && i + 1 < argc) gpus = std::atoi(argv[++i]);
    else args.push_back(argv[i]);
  }
  if (int const present = strata::cuda::device_count(); present < gpus) {
    std::printf("SKIPPED: these %s tests need %d CUDA device(s), this process sees %d; they run on a GPU machine "
                "(scripts/gpu-check)\n", what, gpus, present);
    return 77;
  }
  signal(SIGALRM, [](int) {
    constexpr char text[] = "watchdog fired: a GPU test hung\n";
    (void)!write(2, text, sizeof text - 1);
    _exit(3);
  });
  alarm(watchdog_seconds);
  doctest::Context context(int(args.size()), args.data());
  if (gpus == 0) context.addFilter("test-case-exclude", "gpu:*,gpus2:*");
  else context.addFilter("test-case", gpus == 1 ? "gpu:*" : "gpus2:*");
  return context.run();
}
