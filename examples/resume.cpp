// Fault-tolerant training: the flagship MLP on Fashion-MNIST with BackupAndRestore. Kill
// it at any moment (or let it kill itself with --interrupt-at-step), run the same command
// again, and it continues from its last backup — same weights, same optimizer state, same
// place in the shuffled epoch — finishing exactly as an uninterrupted run would. At the
// end it saves the weights and reloads them into a fresh model for inference.
//
//   resume [--dir DIR] [--epochs N] [--interrupt-at-step S]

#include <csignal>
#include <cstdint>
#include <iostream>
#include <string>
#include <string_view>

#include <strata.hpp>

#include "command_line.hpp"

namespace {
// Simulates a crash (a pre-empted machine, an OOM kill): SIGKILL, nothing is cleaned up.
struct InterruptAt {
  std::int64_t step = -1;
  void on_batch_end(strata::BatchLogs const&, strata::TrainingState const& state) {
    if (state.progress.step != step) return;
    std::cout << "\n*** interrupted with SIGKILL at optimizer step " << step << " ***" << std::endl;
    std::raise(SIGKILL);
  }
};
}  // namespace

int main(int argc, char** argv) {
  std::string dir = "resume-run";
  int epochs = 3;
  InterruptAt interrupt;
  bool const taken = examples::read_flags(argc, argv, "--dir DIR --epochs N --interrupt-at-step S",
                                          [&](std::string_view flag, examples::FlagValue value) {
                                            if (flag == "--dir") dir = value.text();
                                            else if (flag == "--epochs") epochs = value.number<int>();
                                            else if (flag == "--interrupt-at-step")
                                              interrupt.step = value.number<std::int64_t>();
                                            else return false;
                                            return true;
                                          });
  if (!taken) return 2;

  try {
    auto const train = strata::data::fashion_mnist(strata::data::Split::train);
    auto const test = strata::data::fashion_mnist(strata::data::Split::test);
    using Model = strata::Sequential<strata::Dense<784, 256>, strata::Relu, strata::Dense<256, 10>>;
    Model model(/*seed=*/2026);
    strata::Trainer<strata::Mirrored<2>> trainer;

    // A backup every 100 optimizer steps and at every epoch end; the best epoch's weights kept apart.
    strata::BackupAndRestore backup{.directory = dir + "/backup", .every_steps = 100};
    strata::ModelCheckpoint best{.directory = dir + "/best", .save_best_only = true, .monitor = "val_accuracy",
                                 .save_weights_only = true, .max_to_keep = 1};
    auto const history = trainer.fit(model, strata::Adam{.lr = 1e-3f}, strata::SoftmaxCrossEntropy{}, train,
                                     {.epochs = epochs, .batch_size = 128, .validation = test, .seed = 7},
                                     strata::ProgressBar{}, interrupt, backup, best);
    if (backup.restored) {
      std::cout << "this run resumed from " << backup.restored->path.string() << "\n";
      for (auto const& [path, why] : backup.restored->skipped) std::cout << "  skipped damaged " << why << "\n";
    } else {
      std::cout << "this run started from scratch (no backup in " << dir << "/backup)\n";
    }

    // The final weights, for inference elsewhere: saved, then loaded into a fresh model.
    strata::save_checkpoint(dir + "/final.safetensors", model);
    Model reloaded;
    strata::load_checkpoint(dir + "/final.safetensors", reloaded);
    auto const result = trainer.evaluate(reloaded, strata::SoftmaxCrossEntropy{}, test);
    std::cout << "history has " << history.epochs() << " epochs; best val_accuracy " << best.best << " saved in "
              << (best.last_saved ? best.last_saved->string() : std::string("-")) << "\n";
    std::cout << "test_accuracy=" << *result.accuracy << std::endl;
  } catch (strata::Error const& error) {
    std::cerr << "error: " << error.what() << '\n';
    return 1;
  }
}
