#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cstring>
#include <algorithm>
#include <immintrin.h>
// Read+write (x = x*a + b) over a buffer of S MB split over 2 threads, repeated; GB/s of read+write.
int main() {
  for (int mb : {4, 8, 16, 24, 32, 48, 64, 96, 128, 256}) {
    size_t n = size_t(mb) << 18;  // floats
    float* x = static_cast<float*>(std::aligned_alloc(2 << 20, n * 4));
    for (size_t i = 0; i < n; ++i) x[i] = 1.0f;
    std::vector<double> times;
    for (int rep = 0; rep < 15; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      std::thread th[2];
      for (int t = 0; t < 2; ++t)
        th[t] = std::thread([=] {
          size_t b = n / 2 * t, e = b + n / 2;
          for (size_t i = b; i < e; ++i) x[i] = x[i] * 0.999f + 0.001f;
        });
      for (auto& t : th) t.join();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    double med = times[times.size() / 2];
    std::printf("%4d MB: %.3f ms  %.1f GB/s (read+write)\n", mb, med * 1e3, 2.0 * n * 4 / med / 1e9);
    std::free(x);
  }
}
