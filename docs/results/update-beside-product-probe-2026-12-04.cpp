// Does the update of the last layers hide behind the first layer's weight gradient when each
// gets a core of its own? dW1 = dy (1024 x 256) * x^T (256 x 784), Eigen fp32, one thread per
// part; the update: SGD with momentum over W2 and W3 (1,059,850 weights), cold (4 sets).
//   sequential: both threads compute half of dW1's columns, barrier, both update half.
//   overlapped: thread 1 updates all of it, then computes dW1's columns [c, 784); thread 0
//               computes [0, c). c is swept.
#include <Eigen/Dense>
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
int main() {
  Eigen::setNbThreads(1);
  Mat dy = Mat::Random(1024, 256), x = Mat::Random(784, 256), dw(1024, 784);
  std::size_t const n = 1024 * 1024 + 1024 + 1024 * 10 + 10;
  int const sets = 4;
  std::vector<float*> w(sets), g(sets), m(sets);
  for (int s = 0; s < sets; ++s) {
    w[s] = static_cast<float*>(std::aligned_alloc(2 << 20, 6 << 20));
    g[s] = static_cast<float*>(std::aligned_alloc(2 << 20, 6 << 20));
    m[s] = static_cast<float*>(std::aligned_alloc(2 << 20, 6 << 20));
    for (std::size_t i = 0; i < n; ++i) w[s][i] = 1, g[s][i] = 1e-3f, m[s][i] = 0;
  }
  auto update = [&](int s, std::size_t b, std::size_t e) {
    float* __restrict W = w[s]; float* __restrict M = m[s]; float const* __restrict G = g[s];
    for (std::size_t i = b; i < e; ++i) { M[i] = 0.9f * M[i] + G[i]; W[i] -= 0.01f * M[i]; }
  };
  auto columns = [&](int c0, int c1) { dw.middleCols(c0, c1 - c0).noalias() = dy * x.middleRows(c0, c1 - c0).transpose(); };
  int const reps = 300;
  auto run = [&](int mode, int c) {  // mode 0: sequential; 1: overlapped at c
    std::barrier sync(2);
    auto t0 = std::chrono::steady_clock::now();
    std::thread th[2];
    for (int t = 0; t < 2; ++t)
      th[t] = std::thread([&, t] {
        for (int r = 0; r < reps; ++r) {
          int s = r % sets;
          if (mode == 0) {
            columns(t == 0 ? 0 : 392, t == 0 ? 392 : 784);
            sync.arrive_and_wait();
            update(s, t == 0 ? 0 : n / 2, t == 0 ? n / 2 : n);
          } else if (t == 0) {
            columns(0, c);
          } else {
            update(s, 0, n);
            columns(c, 784);
          }
          sync.arrive_and_wait();
        }
      });
    for (auto& t : th) t.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps * 1e3;
  };
  for (int round = 0; round < 3; ++round) {
    std::printf("sequential: %.3f ms |", run(0, 0));
    for (int c : {432, 464, 496, 528, 560}) std::printf(" c=%d: %.3f", c, run(1, c));
    std::printf(" ms\n");
  }
}
