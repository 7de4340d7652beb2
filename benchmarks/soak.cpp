// Soak: 20,000 training steps of Trainer<Mirrored<4>> on real data, reporting resident
// memory and thread count after warm-up and at the end. Nothing may grow: a step allocates
// nothing and replica threads are persistent. Not a timed test; figures in docs/reliability.md.
//   soak [steps]

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include <strata.hpp>

namespace {
// VmRSS (KiB) and Threads from /proc/self/status.
std::pair<long, long> rss_and_threads() {
  std::ifstream status("/proc/self/status");
  long rss = -1, threads = -1;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stol(line.substr(6));
    if (line.rfind("Threads:", 0) == 0) threads = std::stol(line.substr(8));
  }
  return {rss, threads};
}
}  // namespace

int main(int argc, char** argv) {
  long const steps = argc > 1 ? std::atol(argv[1]) : 20000;
  auto const train = strata::data::fashion_mnist(strata::data::Split::train).take(6400);
  using Model = strata::Sequential<strata::Dense<784, 64>, strata::Relu, strata::Dropout, strata::Dense<64, 10>>;
  Model model(1, {}, {}, strata::Dropout{0.1f}, {});
  strata::Trainer<strata::Mirrored<4>> trainer;
  constexpr int batch = 64;
  int const epochs = int((steps + 99) / 100);  // 6400 / 64 = 100 steps per epoch
  long done = 0;
  std::pair<long, long> warm{};
  struct Probe {
    long* done;
    std::pair<long, long>* warm;
    bool on_batch_end(strata::BatchLogs const&) {
      if (++*done == 200) *warm = rss_and_threads();  // after the first epochs' one-time allocations
      return false;
    }
  } probe{&done, &warm};
  auto const start = std::chrono::steady_clock::now();
  auto const history = trainer.fit(model, strata::Adam{}, strata::SoftmaxCrossEntropy{}, train,
                                   {.epochs = epochs, .batch_size = batch, .seed = 3}, probe);
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto const end = rss_and_threads();
  std::cout << "steps " << done << " in " << seconds << " s, final loss " << history["loss"].back() << '\n'
            << "after 200 steps: rss " << warm.first << " KiB, threads " << warm.second << '\n'
            << "at the end:      rss " << end.first << " KiB, threads " << end.second << '\n';
  bool const grew = end.first > warm.first + 1024 || end.second != warm.second;  // 1 MiB slack for libc arenas
  std::cout << (grew ? "GROWTH" : "no growth") << std::endl;
  return grew ? 1 : 0;
}
