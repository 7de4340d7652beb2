#pragma once
// Memory figures of one process: what the operating system charges it (resident set, and its
// high-water mark) and what strata itself holds (the parameter arena, activations, workspaces,
// device memory on Cuda).

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include <sys/resource.h>
#include <unistd.h>

namespace strata::profile {

struct Memory {
  std::int64_t peak_rss = 0;     // bytes: the process's resident high-water mark (getrusage)
  std::int64_t rss = 0;          // bytes: resident now (/proc/self/statm)
  std::int64_t arena = 0;        // bytes: weights, gradient arenas, optimizer state, rounded weights
  std::int64_t activations = 0;  // bytes: activations kept from forward for backward, all local replicas
  std::int64_t workspaces = 0;   // bytes: whole workspaces (activations, gradients, scratch), all local replicas
  std::int64_t device = -1;      // bytes in use on the GPUs (Cuda), -1 on the CPU
};

// Adds what a device's replica passes hold to `m`: their workspaces and the activations in
// them, and on Cuda the bytes in use on their GPUs.
template <class Passes>
void add_pass_memory(Passes& passes, Memory& m) {
  for (auto& pass : passes) {
    if constexpr (requires { pass.workspace().bytes(); }) {
      m.activations += std::int64_t(pass.workspace().activation_bytes());
      m.workspaces += std::int64_t(pass.workspace().bytes());
    }
    if constexpr (requires { pass.device_memory_used(); })  // one replica per GPU
      m.device = std::max<std::int64_t>(m.device, 0) + std::int64_t(pass.device_memory_used());
  }
}

// Fills `m.peak_rss` and `m.rss` for this process (Linux; zero where unreadable).
inline void read_process_memory(Memory& m) {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) == 0) m.peak_rss = std::int64_t(usage.ru_maxrss) * 1024;  // KiB on Linux
  m.rss = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    long pages = 0, resident = 0;
    if (std::fscanf(f, "%ld %ld", &pages, &resident) == 2) m.rss = std::int64_t(resident) * ::sysconf(_SC_PAGESIZE);
    std::fclose(f);
  }
  // The kernel updates the high-water mark lazily: it may trail what is resident right now.
  if (m.peak_rss < m.rss) m.peak_rss = m.rss;
}

}  // namespace strata::profile
