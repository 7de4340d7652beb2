// The flagship's model and data, watched: where each step's time goes, the memory
// high-water, a trace timeline and TensorBoard curves (docs/monitoring.md).
//
//   monitoring [--epochs N] [--batch-size B] [--out DIR] [--update-freq N] [--profile-skip N] [--profile-steps N]
//              [--profile-every N] [--strategy mirrored|parameter-server]
//
// writes DIR/trace.json (open it in ui.perfetto.dev or chrome://tracing), DIR/logs/
// (`tensorboard --logdir DIR/logs`) and DIR/history.csv, and prints the profile summary after
// training, and that of the evaluation on the test set. --profile-skip and --profile-steps keep
// the spans of a window of steps only (FitOptions::profile_steps): a long run's summary and
// trace without its whole history in memory; --profile-every N repeats that window every N
// steps, sampling the whole run. --strategy parameter-server trains on
// Trainer<ParameterServer<2, 1>> (staleness 1) instead of Trainer<Mirrored<2>>: the summary
// then shows the workers' pulls, passes and pushes and the server's updates. The last line
// is `test_accuracy=0.xxxx`.

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>

#include <strata.hpp>
#include <strata/tensorboard.hpp>
#ifdef STRATA_EXAMPLE_PS
#include <strata/ps.hpp>
#endif

#include "command_line.hpp"

int main(int argc, char** argv) {
  int epochs = 5;
  int batch_size = 128;
  int update_freq = 50;
  strata::profile::StepWindow window;
  std::filesystem::path out = "monitoring";
  std::string strategy = "mirrored";
  bool const taken = examples::read_flags(
      argc, argv,
      "--epochs N --batch-size B --out DIR --update-freq N --profile-skip N --profile-steps N --profile-every N "
      "--strategy mirrored|parameter-server",
      [&](std::string_view flag, examples::FlagValue value) {
        if (flag == "--epochs") epochs = value.number<int>();
        else if (flag == "--batch-size") batch_size = value.number<int>();
        else if (flag == "--update-freq") update_freq = value.number<int>();
        else if (flag == "--out") out = value.text();
        else if (flag == "--profile-skip") window.skip = value.number<std::int64_t>();
        else if (flag == "--profile-steps") window.steps = value.number<std::int64_t>();
        else if (flag == "--profile-every") window.every = value.number<std::int64_t>();
        else if (flag == "--strategy") strategy = value.text();
        else return false;
        return true;
      });
  if (!taken) return 2;
  try {
    auto const train = strata::data::fashion_mnist(strata::data::Split::train);
    auto const test = strata::data::fashion_mnist(strata::data::Split::test);
    using Model = strata::Sequential<strata::Dense<784, 256>, strata::Relu, strata::Dense<256, 10>>;
    Model model(/*seed=*/2026);
    std::filesystem::create_directories(out);
    auto watch = [&](auto& trainer) {
      trainer.fit(model, strata::Adam{.lr = 1e-3f}, strata::SoftmaxCrossEntropy{}, train,
                  {.epochs = epochs, .batch_size = batch_size, .validation = test, .seed = 7, .profile_steps = window},
                  strata::ProgressBar{},
                  strata::Profiler{}, strata::TraceWriter{out / "trace.json"},
                  strata::TensorBoard{out / "logs", {.update_freq = update_freq}},
                  strata::CsvLogger{(out / "history.csv").string()});
      auto const result = trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, test, 256, strata::Profiler{});
      std::cout << "wrote " << out / "trace.json" << ", " << out / "logs" << " and " << out / "history.csv" << '\n';
      std::cout << "test_accuracy=" << *result.accuracy << std::endl;
    };
    if (strategy == "mirrored") {
      strata::Trainer<strata::Mirrored<2>> trainer;
      std::cout << "Fashion-MNIST on " << trainer.num_replicas_in_sync() << " replicas, monitored into " << out << "\n";
      watch(trainer);
      return 0;
    }
#ifdef STRATA_EXAMPLE_PS
    if (strategy == "parameter-server") {
      strata::Trainer<strata::ParameterServer<2, 1>> trainer({.staleness = 1});
      std::cout << "Fashion-MNIST on a ParameterServer of 2 workers and 1 server, monitored into " << out << "\n";
      watch(trainer);
      return 0;
    }
#endif
    std::cerr << "--strategy " << strategy << ": use mirrored, or parameter-server (built where ZeroMQ is found)\n";
    return 2;
  } catch (strata::Error const& error) {
    std::cerr << "error: " << error.what() << '\n';
    return 1;
  }
}
