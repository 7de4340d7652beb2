#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <algorithm>
#include <atomic>
#include <barrier>
#ifndef THREADS
#define THREADS 2  // threads the update is split over (-DTHREADS=1: one)
#endif
// SGD momentum over `sets` sets of (w, g, m), 1,863,690 floats each, 2 threads each taking half, a barrier per update.
int main(int argc, char** argv) {
  size_t const n = 1863690;
  for (int sets : {1, 2, 4, 8}) {
    std::vector<float*> w(sets), g(sets), m(sets);
    for (int s = 0; s < sets; ++s) {
      w[s] = static_cast<float*>(std::aligned_alloc(2 << 20, 8 << 20));
      g[s] = static_cast<float*>(std::aligned_alloc(2 << 20, 8 << 20));
      m[s] = static_cast<float*>(std::aligned_alloc(2 << 20, 8 << 20));
      for (size_t i = 0; i < n; ++i) { w[s][i] = 1; g[s][i] = 1e-3f; m[s][i] = 0; }
    }
    int const updates = 400;
    std::barrier sync(THREADS);
    std::vector<double> times;
    auto t0 = std::chrono::steady_clock::now();
    std::thread th[THREADS];
    for (int t = 0; t < THREADS; ++t)
      th[t] = std::thread([&, t] {
        size_t b = n / THREADS * t, e = t == THREADS - 1 ? n : n / THREADS * (t + 1);
        for (int u = 0; u < updates; ++u) {
          int s = u % sets;
          float* __restrict W = w[s]; float* __restrict M = m[s]; float const* __restrict G = g[s];
          for (size_t i = b; i < e; ++i) { M[i] = 0.9f * M[i] + G[i]; W[i] -= 0.01f * M[i]; }
          sync.arrive_and_wait();
        }
      });
    for (auto& t : th) t.join();
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("sets %d (%.0f MB): %.3f ms per whole update, %.0f GB/s\n", sets, sets * 3 * n * 4 / 1e6, total / updates * 1e3, updates * 5.0 * n * 4 / total / 1e9);
  }
}
