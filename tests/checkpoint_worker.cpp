// A training process for the kill tests: Fashion-MNIST, Mirrored<2>, dropout, Adam, a
// backup after every optimizer step. It can kill itself with SIGKILL at a given step, or
// in the middle of its K-th backup write (its temporary file written, not yet made durable
// and renamed), so the test can restart it and compare with an uninterrupted run.
//
//   checkpoint_worker <backup-dir> <result-file> [--kill-at-step N | --kill-during-save K]
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "strata.hpp"

namespace {

struct KillAtStep {
  std::int64_t step = -1;
  void on_batch_end(strata::BatchLogs const&, strata::TrainingState const& s) {
    if (s.progress.step == step) std::raise(SIGKILL);
  }
};

// The backup write at which to die (0: none), and how many have reached their fsync.
int kill_at_save = 0;
std::atomic<int> saves_seen{0};

// Whether fd is open on a backup's temporary file (".backup-...tmp-...", atomic_file.hpp).
bool is_backup_temporary(int fd) {
  std::error_code error;
  auto const path = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), error);
  return !error && path.filename().string().rfind(".backup-", 0) == 0 && strata::io::is_abandoned_temporary(path);
}

}  // namespace

// strata's writes are compiled into this program (header-only), so its fsync calls land here
// before libc's: the K-th backup dies with its temporary file fully written but not synced
// or renamed, at the same point every run. (A thread watching for the file raced the write.)
extern "C" int fsync(int fd) {
  if (kill_at_save > 0 && is_backup_temporary(fd) && ++saves_seen == kill_at_save) std::raise(SIGKILL);
  return int(::syscall(SYS_fsync, fd));
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::cerr << "usage: checkpoint_worker <backup-dir> <result-file> [--kill-at-step N | --kill-during-save K]\n";
    return 2;
  }
  std::string const dir = argv[1];
  KillAtStep killer;
  if (argc == 5 && std::string(argv[3]) == "--kill-at-step") killer.step = std::atoll(argv[4]);
  std::filesystem::create_directories(dir);
  if (argc == 5 && std::string(argv[3]) == "--kill-during-save") kill_at_save = std::atoi(argv[4]);

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
