// A training process for the kill tests: Fashion-MNIST, Mirrored<2>, dropout, Adam, a
// backup after every optimizer step. It can kill itself with SIGKILL at a given step, or
// in the middle of its K-th backup write (an inotify thread sees the temporary file
// appear), so the test can restart it and compare with an uninterrupted run.
//
//   checkpoint_worker <backup-dir> <result-file> [--kill-at-step N | --kill-during-save K]
#include <sys/inotify.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "strata.hpp"

namespace {

struct KillAtStep {
  std::int64_t step = -1;
  void on_batch_end(strata::BatchLogs const&, strata::TrainingState const& s) {
    if (s.progress.step == step) std::raise(SIGKILL);
  }
};

// Kills the process as soon as the K-th backup's temporary file is created.
void kill_during_save(std::string const& dir, int k) {
  int const fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0 || inotify_add_watch(fd, dir.c_str(), IN_CREATE) < 0) std::abort();
  std::thread([fd, k] {
    alignas(inotify_event) char buffer[4096];
    int seen = 0;
    for (;;) {
      ssize_t const n = read(fd, buffer, sizeof buffer);
      for (ssize_t at = 0; n > 0 && at < n;) {
        auto const* event = reinterpret_cast<inotify_event const*>(buffer + at);
        if (event->len > 0 && std::string(event->name).rfind(".backup-", 0) == 0 && ++seen == k) std::raise(SIGKILL);
        at += ssize_t(sizeof(inotify_event) + event->len);
      }
    }
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::cerr << "usage: checkpoint_worker <backup-dir> <result-file> [--kill-at-step N | --kill-during-save K]\n";
    return 2;
  }
  std::string const dir = argv[1];
  KillAtStep killer;
  if (argc == 5 && std::string(argv[3]) == "--kill-at-step") killer.step = std::atoll(argv[4]);
  std::filesystem::create_directories(dir);
  if (argc == 5 && std::string(argv[3]) == "--kill-during-save") kill_during_save(dir, std::atoi(argv[4]));

  auto const data = strata::data::fashion_mnist(strata::data::Split::test);
  strata::Sequential<strata::Dense<784, 64>, strata::Relu, strata::Dropout, strata::Dense<64, 10>> model(
      1, {}, {}, strata::Dropout{0.2f}, {});
  strata::Trainer<strata::Mirrored<2>> trainer;
  strata::BackupAndRestore backup{.directory = dir, .every_steps = 1};
  auto const history = trainer.fit(model, strata::Adam{}, strata::SoftmaxCrossEntropy{}, data.take(1200),
                                   {.epochs = 3, .batch_size = 50, .validation = data.skip(9800), .seed = 7},
                                   killer, backup);

  std::ofstream out(argv[2], std::ios::binary);
  auto const weights = model.parameters();
  out.write(reinterpret_cast<char const*>(weights.data()), std::streamsize(weights.size_bytes()));
  for (char const* metric : {"loss", "accuracy", "val_loss", "val_accuracy"})
    for (double v : history[metric]) out.write(reinterpret_cast<char const*>(&v), sizeof v);
  std::cout << "restored=" << (backup.restored ? backup.restored->path.string() : "none") << " epochs=" << history.epochs()
            << "\n";
  return out ? 0 : 1;
}
