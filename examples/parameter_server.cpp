// The flagship's model and data trained asynchronously by a ParameterServer job of separate
// processes: a chief (the coordinator), "ps" tasks holding the variables and workers that
// pull, compute and push. Every process runs this program with its own TF_CONFIG:
//
//   TF_CONFIG='{"cluster": {"chief": ["localhost:2220"], "worker": ["localhost:2221", "localhost:2222"],
//               "ps": ["localhost:2223", "localhost:2224"]}, "task": {"type": "ps", "index": 0}}' parameter_server
//
//   parameter_server [--epochs N] [--batch-size B] [--staleness S] [--train-samples N]
//                    [--step-timeout MS] [--server-timeout MS] [--checkpoint FILE] [--precision fp32|bf16]
//                    [--grad-accum K] [--steps-per-epoch N]
//
// --precision bf16 is MixedPrecision: the workers (and the chief's evaluation) compute with
// bf16 weights and activations, on bf16 products where the CPU has them; the servers keep
// and update fp32 weights. --grad-accum K makes each step K consecutive batches that one
// worker trains whole, with one push (as GradAccum<K>). Every process of a job must be
// given the same flags. --steps-per-epoch N makes an epoch N batches of pass after pass over
// the data (Keras' steps_per_epoch), so that checkpoints and evaluations come every N batches.
// With --checkpoint, the chief saves every server's shards and optimizer state after each
// epoch, and a job started again (every process, after a server was lost) continues from
// the last one.
// An "evaluator" task (TF_CONFIG's task type "evaluator"; needs --checkpoint) evaluates each
// epoch's checkpoint on the test set while the job trains on, printing one line per
// checkpoint and, after the last epoch's, `test_accuracy=0.xxxx`; when "cluster" lists it,
// the chief leaves the per-epoch evaluation to it.
// scripts/parameter-server starts a whole job on this machine (EVALUATOR=1 adds the
// evaluator). The chief prints each epoch and what happened to the workers (lost, joined),
// and ends with `test_accuracy=0.xxxx` and the updates each server applied; workers and
// servers exit when the chief tells them the job is over. Exit status 1 with the reason on
// an error.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>
#include <string_view>
#include <type_traits>

#include <strata.hpp>
#include <strata/ps.hpp>

#include "command_line.hpp"

int main(int argc, char** argv) {
  strata::ps::JobOptions options{.epochs = 3, .batch_size = 64, .seed = 7, .staleness = 2,
                                 .partition = {.min_shard_bytes = 64 << 10}};
  std::size_t train_samples = 0;  // 0: all 60,000
  std::string precision = "fp32";
  bool const taken = examples::read_flags(
      argc, argv,
      "--epochs N --batch-size B --staleness S --train-samples N --step-timeout MS --server-timeout MS "
      "--checkpoint FILE --precision fp32|bf16 --grad-accum K --steps-per-epoch N",
      [&](std::string_view flag, examples::FlagValue value) {
        if (flag == "--epochs") options.epochs = value.number<int>();
        else if (flag == "--batch-size") options.batch_size = value.number<int>();
        else if (flag == "--staleness") options.staleness = value.number<int>();
        else if (flag == "--train-samples") train_samples = value.number<std::size_t>();
        else if (flag == "--step-timeout") options.step_timeout = std::chrono::milliseconds(value.number<int>());
        else if (flag == "--server-timeout") options.server_timeout = std::chrono::milliseconds(value.number<int>());
        else if (flag == "--checkpoint") options.checkpoint = value.text();
        else if (flag == "--precision") precision = value.text();
        else if (flag == "--grad-accum") options.accumulation_steps = value.number<int>();
        else if (flag == "--steps-per-epoch") options.steps_per_epoch = value.number<std::int64_t>();
        else return false;
        return true;
      });
  if (!taken) return 2;
  if (precision != "fp32" && precision != "bf16") {
    std::cerr << "--precision " << precision << " is not fp32 or bf16\n";
    return 2;
  }
  // The workers' and the chief's compute type: float, or bf16 (MixedPrecision).
  auto const run = [&]<class Compute>(Compute) -> int {
    try {
      auto const spec = strata::ps::ClusterSpec::from_environment();
      using Model = strata::Sequential<strata::Dense<784, 256>, strata::Relu, strata::Dense<256, 10>>;
      Model const initial(/*seed=*/2026);  // every process builds the same: the servers start from it
      strata::Adam const adam{.lr = 1e-3f};
      strata::SoftmaxCrossEntropy const loss;
      auto train = strata::data::fashion_mnist(strata::data::Split::train);
      if (train_samples > 0) train = train.take(train_samples);
      auto const test = strata::data::fashion_mnist(strata::data::Split::test);

      switch (spec.role) {
        case strata::ps::Role::ps:
          strata::ps::run_server(spec, initial, adam, options);
          return 0;
        case strata::ps::Role::worker:
          strata::ps::run_worker<Compute>(spec, initial, loss, train, options);
          return 0;
        case strata::ps::Role::evaluator: {
          auto const report = strata::ps::run_evaluator<Compute>(
              spec, initial, loss, test, options, [&](strata::CheckpointEvaluation const& e) {
                std::cout << "checkpoint of epoch " << e.epoch << "/" << options.epochs << " (step " << e.step
                          << "): val_loss " << e.evaluation.loss << ", val_accuracy " << *e.evaluation.accuracy
                          << std::endl;
              });
          for (auto const& [path, why] : report.skipped) std::cout << "skipped " << path << ": " << why << std::endl;
          std::cout << "test_accuracy=" << *report.evaluations.back().evaluation.accuracy << std::endl;
          return 0;
        }
        case strata::ps::Role::chief: break;
      }
      std::cout << "ParameterServer: " << spec.workers.size() << " workers, " << spec.servers.size()
                << " servers, staleness " << options.staleness << ", grad-accum " << options.accumulation_steps << ", "
                << (std::is_same_v<Compute, strata::bf16> ? "MixedPrecision" : "FullPrecision") << "; " << Model::name()
                << " on " << train.size() << " Fashion-MNIST images, batch " << options.batch_size
                << (spec.evaluators.empty() ? "" : "; the evaluator task evaluates each epoch") << std::endl;
      Model trained = initial;
      auto const history = strata::ps::run_chief<Compute>(
          spec, initial, adam, loss, train, test, options,
          [](strata::train::EpochLogs const& logs) {
            std::cout << "epoch " << logs.epoch + 1 << "/" << logs.epochs << ": " << logs.steps << " steps in "
                      << logs.seconds << " s, loss " << logs.loss << ", accuracy " << *logs.accuracy;
            if (logs.val_loss) std::cout << ", val_loss " << *logs.val_loss << ", val_accuracy " << *logs.val_accuracy;
            std::cout << std::endl;
          },
          [](std::string const& event) { std::cout << "chief: " << event << std::endl; }, &trained);
      std::int64_t const batches = options.steps_per_epoch > 0
                                       ? options.steps_per_epoch
                                       : (std::int64_t(train.size()) + options.batch_size - 1) / options.batch_size;
      std::int64_t const steps = std::int64_t(history["loss"].size()) *
                                 ((batches + options.accumulation_steps - 1) / options.accumulation_steps);
      std::cout << "steps=" << steps << std::endl;  // the chief's "server s applied N updates" lines say N = steps
      // The final weights on the test set: the last epoch's evaluation, or (with an evaluator
      // task) the same evaluation here, which the evaluator's last line must match.
      double const accuracy =
          history.contains("val_accuracy")
              ? history["val_accuracy"].back()
              : *strata::Trainer<strata::OneDevice, strata::Precision<Compute>>{}.evaluate(trained, loss, test).accuracy;
      std::cout << "test_accuracy=" << accuracy << std::endl;
      return 0;
    } catch (strata::Error const& error) {
      std::cerr << "error: " << error.what() << std::endl;
      return 1;
    }
  };
  return precision == "bf16" ? run(strata::bf16{}) : run(float{});
}
