// MultiWorkerMirrored when a worker fails, driven under mpirun by multi_worker_faults.sh:
//
//   multi_worker_faults stall RESULT           rank 1 stops itself (SIGSTOP) after step 3; the
//                                              chief must throw a CommError naming it within
//                                              the timeout, writes what it saw to RESULT and
//                                              ends the job (MPI_Abort: the stopped rank
//                                              cannot end by itself)
//   multi_worker_faults train BACKUP OUT [KILL_STEP]
//                                              trains Fashion-MNIST with BackupAndRestore in
//                                              BACKUP (every 4 steps); with KILL_STEP, the
//                                              last rank kills itself (SIGKILL) after that
//                                              global step. The chief writes the final
//                                              weights to OUT and prints where it restored.
//                                              "{rank}" in BACKUP: one directory per worker.
//   multi_worker_faults compare A B TOLERANCE  (no MPI) the largest difference of two weight
//                                              files relative to B's largest weight; fails
//                                              above TOLERANCE
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "mpi_world.hpp"
#include "strata.hpp"
#include "strata/multi_worker.hpp"

using namespace strata;

namespace {

using Mlp = Sequential<Dense<784, 48>, Relu, Dropout, Dense<48, 10>>;
constexpr auto stall_timeout = std::chrono::seconds(2);

// Sends `signal` to this process after global step `step` (optimizer steps of the job).
struct SignalAfter {
  std::int64_t step = -1;
  int signal = 0;
  bool armed = false;
  std::chrono::steady_clock::time_point* last_step_end = nullptr;
  void on_batch_end(BatchLogs const&, io::TrainingState const& state) {
    if (last_step_end) *last_step_end = std::chrono::steady_clock::now();
    if (armed && state.progress.step == step) std::raise(signal);
  }
};

// Where fit started: the restored position, or step 0.
struct StartedAt {
  io::Progress progress{};
  void on_train_begin(TrainBegin const&, io::TrainingState& state) { progress = state.progress; }
};

data::Dataset training_data() { return data::fashion_mnist(data::Split::train).take(1800); }

int stall_job(char const* result_path) {
  Mlp model(7);
  Trainer<MultiWorkerMirrored<1>> trainer({.timeout = stall_timeout});
  auto last_step_end = std::chrono::steady_clock::now();
  SignalAfter stop_rank_1{.step = 3, .signal = SIGSTOP, .armed = world_rank() == 1, .last_step_end = &last_step_end};
  try {
    trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, training_data(), {.epochs = 1, .batch_size = 60}, stop_rank_1);
  } catch (CommError const& e) {
    double const waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_step_end).count();
    if (world_rank() == 0) {
      std::ofstream(result_path) << "CommError after " << waited << " s: " << e.what() << '\n';
      std::cout << "the chief caught: " << e.what() << " (" << waited << " s after its last step)" << std::endl;
    }
    MPI_Abort(MPI_COMM_WORLD, 0);
  }
  if (world_rank() == 0) std::ofstream(result_path) << "no error: training finished with rank 1 stopped\n";
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

int train_job(char const* backup, char const* out, std::int64_t kill_step) {
  Mlp model(7);
  Trainer<MultiWorkerMirrored<1>> trainer;
  // "{rank}" in BACKUP: a directory per worker, as on machines without a shared filesystem.
  std::string directory = backup;
  if (auto at = directory.find("{rank}"); at != std::string::npos) directory.replace(at, 6, std::to_string(world_rank()));
  BackupAndRestore restore{.directory = directory, .every_steps = 4};
  StartedAt started;
  SignalAfter kill{.step = kill_step, .signal = SIGKILL, .armed = kill_step > 0 && world_rank() == world_size() - 1};
  auto const history = trainer.fit(model, Adam{.lr = 2e-3f}, SoftmaxCrossEntropy{}, training_data(),
                                   {.epochs = 2, .batch_size = 60, .seed = 3}, restore, started, kill);
  if (world_rank() == 0) {
    if (restore.restored)
      std::cout << "restored step=" << started.progress.step << " epoch=" << started.progress.epoch
                << " batch=" << started.progress.batch << " on " << world_size() << " workers\n";
    else
      std::cout << "fresh start\n";
    std::ofstream file(out, std::ios::binary);
    file.write(reinterpret_cast<char const*>(model.parameters().data()),
               std::streamsize(model.parameters().size() * sizeof(float)));
    std::cout << "final loss=" << history["loss"].back() << "; weights written to " << out << std::endl;
  }
  return 0;
}

std::vector<float> read_weights(char const* path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw IoError(std::string("cannot open ") + path);
  std::vector<float> w(std::size_t(file.tellg()) / sizeof(float));
  file.seekg(0);
  file.read(reinterpret_cast<char*>(w.data()), std::streamsize(w.size() * sizeof(float)));
  return w;
}

int compare(char const* a_path, char const* b_path, double tolerance) {
  auto const a = read_weights(a_path), b = read_weights(b_path);
  if (a.size() != b.size() || a.empty()) {
    std::cerr << a_path << " has " << a.size() << " weights, " << b_path << " has " << b.size() << '\n';
    return 1;
  }
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  std::cout << "largest difference " << worst / scale << " of the largest weight (tolerance " << tolerance << ")\n";
  return worst / scale <= tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string const mode = argc > 1 ? argv[1] : "";
  if (mode == "compare" && argc == 5) return compare(argv[2], argv[3], std::atof(argv[4]));
  comm::MpiEnvironment mpi(argc, argv);
  try {
    if (mode == "stall" && argc == 3) return stall_job(argv[2]);
    if (mode == "train" && (argc == 4 || argc == 5)) return train_job(argv[2], argv[3], argc == 5 ? std::atoll(argv[4]) : 0);
  } catch (std::exception const& e) {
    std::cerr << "rank " << world_rank() << ": " << e.what() << std::endl;
    return 1;
  }
  std::cerr << "usage: multi_worker_faults stall RESULT | train BACKUP OUT [KILL_STEP] | compare A B TOLERANCE\n";
  return 2;
}
