#pragma once
// Input that each worker of a job reads for itself, as opposed to the default, where every
// worker reads the same global batches and takes its shards of them (TensorFlow's
// AutoShard::data):
//
//   PerWorker{fn}            tf's distribute_datasets_from_function: fn(InputContext const&)
//                            returns this worker's Dataset
//   files_for_worker(...)    AutoShard::file: worker i reads files i, i + workers, ...
//   PerWorker{whole data}    AutoShard::off: every worker trains on all of it
//
//   trainer.fit(model, opt, loss, strata::PerWorker{[&](strata::InputContext const& ctx) {
//                 return read_csv_files(strata::files_for_worker(files, ctx));
//               }}, {.batch_size = 256});
//
// Each step, every worker trains on a local batch of batch_size / workers samples of its
// own data (split over its replicas), and the step's gradient is the mean over the samples
// of every worker's local batch. Workers with less data take empty batches until the one
// with the most has finished its epoch: no sample is lost or seen twice, nobody hangs.

#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::strategy {

// What an input function knows about its place in the job (tf.distribute.InputContext).
struct InputContext {
  int num_input_pipelines = 1;  // the workers (processes) of the job: one input pipeline each
  int input_pipeline_id = 0;    // this worker's
  int num_replicas_in_sync = 1;

  // The samples each worker's local batch holds for a global batch of `global_batch_size`.
  [[nodiscard]] int per_worker_batch_size(int global_batch_size) const {
    return divide(global_batch_size, num_input_pipelines, "workers");
  }
  // The samples each replica's shard holds.
  [[nodiscard]] int per_replica_batch_size(int global_batch_size) const {
    return divide(global_batch_size, num_replicas_in_sync, "replicas in sync");
  }

 private:
  static int divide(int global, int parts, char const* what) {
    if (global < parts || global % parts != 0)
      throw ConfigError(strata::detail::message("InputContext: a global batch of ", global, " does not divide over ", parts,
                                                " ", what, "; use a multiple of ", parts));
    return global / parts;
  }
};

// Input made by each worker: make(InputContext const&) returns a data::Dataset.
template <class Make>
struct PerWorker {
  Make make;
};
template <class Make>
PerWorker(Make) -> PerWorker<Make>;

// AutoShard::file: this worker's files, every num_input_pipelines-th from its own index on,
// in the order given. Fewer files than workers is an error (some worker would have none).
inline std::vector<std::filesystem::path> files_for_worker(std::vector<std::filesystem::path> const& files,
                                                           InputContext const& context) {
  if (files.size() < std::size_t(context.num_input_pipelines))
    throw DataError(strata::detail::message(
        "files_for_worker: ", files.size(), " files for ", context.num_input_pipelines,
        " workers; AutoShard::file gives each worker whole files, so it needs at least one per worker: split the data "
        "into more files, or shard by data (pass the Dataset itself to fit)"));
  std::vector<std::filesystem::path> mine;
  for (std::size_t i = std::size_t(context.input_pipeline_id); i < files.size();
       i += std::size_t(context.num_input_pipelines))
    mine.push_back(files[i]);
  return mine;
}

// Where one worker's local batch sits in the step's global batch (PerWorker input).
struct WorkerPart {
  int global_size = 0;  // samples of every worker's local batch together; 0: not per-worker input
  int offset = 0;       // samples of the workers before this one
};

}  // namespace strata::strategy
