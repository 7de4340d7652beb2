// The flagship's model and data trained by a job of several processes: MultiWorkerMirrored
// with one replica thread per process by default, under mpirun. Every process runs this
// program; the chief (rank 0) draws the progress bar and prints the results. The last
// line is `test_accuracy=0.xxxx`.
//
//   mpirun -np 2 multi_worker [--epochs N] [--batch-size B] [--replicas-per-process 1|2]
//                             [--backup DIR] [--timeout SECONDS] [--trace FILE] [--compress bf16]
//
// scripts/multi-worker builds and launches it. With --backup, a job that is killed and
// started again continues from the chief's last backup (docs/multi_worker.md). With --trace,
// the chief prints where the time went and writes one trace of every worker's replicas and
// collectives (docs/monitoring.md). With --compress bf16, the gradients cross the processes as
// bf16 (Compress<bf16>, docs/multi_worker.md).

#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include <strata.hpp>
#include <strata/multi_worker.hpp>

#include "command_line.hpp"

struct Options {
  int epochs = 10;
  int batch_size = 128;
  int replicas_per_process = 1;
  std::optional<std::string> backup;
  int timeout_seconds = 600;
  std::optional<std::string> trace;
  bool compress = false;
};

template <int LocalN, class Compression>
int train_and_evaluate(Options const& options) {
  auto const train = strata::data::fashion_mnist(strata::data::Split::train);
  auto const test = strata::data::fashion_mnist(strata::data::Split::test);

  using Model = strata::Sequential<strata::Dense<784, 256>, strata::Relu, strata::Dense<256, 10>>;
  Model model(/*seed=*/2026);  // the chief's weights are broadcast: every worker starts from them

  strata::Trainer<strata::MultiWorkerMirrored<LocalN>, Compression> trainer(
      {.timeout = std::chrono::seconds(options.timeout_seconds)});
  auto const& processes = trainer.strategy().processes();
  bool const chief = processes.is_chief();
  if (chief)
    std::cout << "Fashion-MNIST: " << train.size() << " training and " << test.size() << " test images; "
              << Model::name() << " on " << processes.processes() << " processes x " << LocalN << " replicas = "
              << trainer.num_replicas_in_sync() << " replicas in sync; gradients cross as "
              << strata::dtype_name<typename Compression::wire_type> << '\n';

  strata::FitOptions const fit{.epochs = options.epochs, .batch_size = options.batch_size, .validation = test, .seed = 7};
  auto fit_with = [&](auto&&... callbacks) {
    return trainer.fit(model, strata::Adam{.lr = 1e-3f}, strata::SoftmaxCrossEntropy{}, train, fit,
                       strata::ProgressBar{}, callbacks...);
  };
  auto monitored = [&](auto&&... callbacks) {
    return options.trace ? fit_with(callbacks..., strata::Profiler{}, strata::TraceWriter{*options.trace})
                         : fit_with(callbacks...);
  };
  auto const history =
      options.backup ? monitored(strata::BackupAndRestore{.directory = *options.backup}) : monitored();
  double total_seconds = 0.0;
  for (double s : history.epoch_seconds()) total_seconds += s;
  auto const result = trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, test);  // every worker takes part
  if (chief) {
    std::cout << "trained " << history.epochs() << " epochs in " << total_seconds << " s; test loss " << result.loss
              << '\n';
    std::cout << "test_accuracy=" << *result.accuracy << std::endl;
  }
  return 0;
}

int main(int argc, char** argv) {
  strata::comm::MpiEnvironment mpi(argc, argv);
  Options options;
  bool const taken = examples::read_flags(
      argc, argv,
      "--epochs N --batch-size B --replicas-per-process 1|2 --backup DIR --timeout SECONDS --trace FILE "
      "--compress none|bf16",
      [&](std::string_view flag, examples::FlagValue value) {
        if (flag == "--epochs") options.epochs = value.number<int>();
        else if (flag == "--batch-size") options.batch_size = value.number<int>();
        else if (flag == "--replicas-per-process") options.replicas_per_process = value.number<int>();
        else if (flag == "--backup") options.backup = value.text();
        else if (flag == "--timeout") options.timeout_seconds = value.number<int>();
        else if (flag == "--trace") options.trace = value.text();
        else if (flag == "--compress" && (value.text() == "bf16" || value.text() == "none"))
          options.compress = value.text() == "bf16";
        else if (flag == "--compress")
          throw examples::BadCommandLine{"--compress: '" + value.text() + "' is not none or bf16"};
        else return false;
        return true;
      });
  if (!taken) return 2;
  try {
    // Each choice is its own trainer type: one instantiation per combination offered here.
    auto run = [&]<int LocalN>() {
      return options.compress ? train_and_evaluate<LocalN, strata::Compress<strata::bf16>>(options)
                              : train_and_evaluate<LocalN, strata::NoCompression>(options);
    };
    if (options.replicas_per_process == 1) return run.template operator()<1>();
    if (options.replicas_per_process == 2) return run.template operator()<2>();
    std::cerr << "--replicas-per-process " << options.replicas_per_process << " is not 1 or 2\n";
    return 2;
  } catch (strata::Error const& error) {
    // A failed collective leaves MPI unusable: end every process of the job, not only this one.
    std::cerr << "error: " << error.what() << '\n';
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
