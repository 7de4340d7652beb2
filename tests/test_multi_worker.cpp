// MultiWorkerMirrored<LocalN> across the processes of an MPI job, run under mpirun with 2
// and 3 processes (CTest multi_worker.np2, multi_worker.np3). The oracle is a single-process
// run: MultiWorkerMirrored<LocalN> on P processes against Mirrored<LocalN × P> in one, on the
// same data, seed and batches. Every process runs the same cases in the same order; the exit
// code is the worst over all processes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mpi_world.hpp"
#include "random_matrix.hpp"
#include "strata.hpp"
#include "strata/multi_worker.hpp"

using namespace strata;

namespace {
using Mlp = Sequential<Dense<20, 32>, Relu, Dense<32, 24>, Tanh, Dense<24, 5>>;

data::Dataset synthetic(int samples) {
  Rng rng(11);
  Matrix x = random_matrix(rng, 20, samples);
  std::vector<std::int32_t> labels;
  for (int j = 0; j < samples; ++j) labels.push_back(std::int32_t(rng() % 5));
  return {std::move(x), labels};
}

// Trains Trainer<Ps...> on 480 samples in global batches of 24 (20 steps, shuffled); the
// model starts from `seed`. Returns the weights.
template <class... Ps, class Opt>
std::vector<float> train_weights(std::uint64_t seed, Opt const& optimizer, float clip = 0.0f) {
  Mlp model(seed);
  Trainer<Ps...> trainer;
  trainer.fit(model, optimizer, SoftmaxCrossEntropy{}, synthetic(480),
              {.epochs = 1, .batch_size = 24, .seed = 5, .clip_global_norm = clip});
  return {model.parameters().begin(), model.parameters().end()};
}

// The largest difference relative to the largest weight.
double relative_difference(std::vector<float> const& a, std::vector<float> const& b) {
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return worst / scale;
}

// Every process's weights, as the chief's: the same bits everywhere.
bool same_on_every_process(std::vector<float> const& weights) {
  std::vector<float> chief = weights;
  MPI_Bcast(chief.data(), int(chief.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int const mine = chief == weights ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

// MultiWorkerMirrored<LocalN> on this job against Mirrored<LocalN × processes> in one process.
template <int LocalN, int Total, class... Ps, class Opt>
void check_against_one_process(Opt const& optimizer, float clip, double tolerance) {
  // Workers start from different weights: the chief's broadcast makes them one model.
  auto const multi = train_weights<MultiWorkerMirrored<LocalN>, Ps...>(100 + std::uint64_t(world_rank()), optimizer, clip);
  auto const single = train_weights<Mirrored<Total>, Ps...>(100, optimizer, clip);
  CHECK(same_on_every_process(multi));
  CHECK(relative_difference(multi, single) < tolerance);
  Mlp const start(100);
  std::vector<float> const initial(start.parameters().begin(), start.parameters().end());
  CHECK(relative_difference(multi, initial) > 1e-3);  // it trained
}

template <int LocalN, int Total>
void check_all() {
  check_against_one_process<LocalN, Total>(Adam{.lr = 1e-2f}, 0.0f, 1e-5);
  check_against_one_process<LocalN, Total, GradAccum<2>>(Sgd{.lr = 0.1f, .momentum = 0.9f}, 0.5f, 1e-5);
  check_against_one_process<LocalN, Total>(Lamb{.lr = 1e-2f}, 0.0f, 1e-5);
  // bf16 weights for forward: a sum in another order can round one weight to the next
  // 16-bit value, so the runs agree to bf16's precision.
  check_against_one_process<LocalN, Total, MixedPrecision>(Adam{.lr = 1e-2f}, 0.0f, 1e-2);
}
}  // namespace

TEST_CASE("MultiWorkerMirrored across processes trains as Mirrored over all replicas in one process") {
  if (world_size() == 2) check_all<2, 4>();
  else if (world_size() == 3) check_all<1, 3>();
  else MESSAGE("run under mpirun with 2 or 3 processes");
}

namespace {
template <int LocalN, int Total>
void check_evaluation() {
  // 203 samples in batches of 24: the last batch (11) has fewer samples than the job has replicas.
  data::Dataset const data = synthetic(203);
  Mlp const model(3);
  Trainer<MultiWorkerMirrored<LocalN>> multi;
  Trainer<OneDevice> one;
  CHECK(multi.num_replicas_in_sync() == Total);
  CHECK(multi.strategy().num_replicas_in_sync() == Total);
  auto const mine = multi.evaluate(model, SoftmaxCrossEntropy{}, data, 24);
  auto const oracle = one.evaluate(model, SoftmaxCrossEntropy{}, data, 24);
  CHECK(mine.samples == 203);
  CHECK(mine.loss == doctest::Approx(oracle.loss).epsilon(1e-6));
  CHECK(*mine.accuracy == *oracle.accuracy);
  CHECK(same_on_every_process({float(mine.loss), float(*mine.accuracy)}));
  Matrix const outputs = multi.predict(model, data, 24);
  Matrix const expected = one.predict(model, data, 24);
  CHECK((outputs - expected).cwiseAbs().maxCoeff() < 1e-5f);
  CHECK(same_on_every_process(std::vector<float>(outputs.data(), outputs.data() + outputs.size())));

  // fit's epoch figures (and validation) are the job's: the same on every process, and
  // those of one process training all the replicas.
  auto history = [&](auto& trainer) {
    Mlp m(4);
    return trainer.fit(m, Adam{}, SoftmaxCrossEntropy{}, synthetic(480),
                       {.epochs = 2, .batch_size = 24, .validation = data});
  };
  Trainer<Mirrored<Total>> single;
  auto const job = history(multi);
  auto const reference = history(single);
  for (char const* key : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
    CAPTURE(key);
    std::vector<float> const figures(job[key].begin(), job[key].end());
    CHECK(same_on_every_process(figures));
    for (std::size_t e = 0; e < figures.size(); ++e)
      CHECK(job[key][e] == doctest::Approx(reference[key][e]).epsilon(1e-5));
  }
}
}  // namespace

TEST_CASE("evaluation, prediction and fit's figures divide the data among the workers and count every sample once") {
  if (world_size() == 2) check_evaluation<2, 4>();
  else if (world_size() == 3) check_evaluation<1, 3>();
}

namespace {
// A callback whose write fails on the chief only (a full disk, say).
struct FailsOnChief {
  bool chief = false;
  void on_train_begin(TrainBegin const& info) { chief = info.chief(); }
  void on_epoch_end(EpochLogs const& logs) {
    if (chief && logs.epoch == 1) throw IoError("/backups/epoch-2: no space left on device");
  }
};
}  // namespace

TEST_CASE("only the chief draws, logs and writes checkpoints; a chief that fails to write fails every worker") {
  std::filesystem::path const dir = std::filesystem::temp_directory_path() / "strata_multi_worker_chief";
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  data::Dataset const data = synthetic(96);
  Trainer<MultiWorkerMirrored<1>> trainer;
  Mlp model(5);
  std::ostringstream drawn;
  ModelCheckpoint checkpoint{.directory = dir / "checkpoints"};
  trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, data, {.epochs = 3, .batch_size = 24},
              ProgressBar(drawn, ProgressBar::Redraw::never), CsvLogger(dir / "log.csv"), checkpoint);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK((world_rank() == 0) == !drawn.str().empty());
  CHECK(checkpoint.saves == (world_rank() == 0 ? 3 : 0));
  std::ifstream log(dir / "log.csv");
  int lines = 0;
  for (std::string line; std::getline(log, line);) ++lines;
  CHECK(lines == 4);  // a header and three epochs, written once

  // Every worker throws the chief's error, with its type and words, after the same epoch.
  Mlp other(5);
  CHECK_THROWS_WITH_AS(trainer.fit(other, Sgd{}, SoftmaxCrossEntropy{}, data, {.epochs = 3, .batch_size = 24},
                                   FailsOnChief{}),
                       "/backups/epoch-2: no space left on device", IoError);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("the same job run twice gives the same bits") {
  auto const first = train_weights<MultiWorkerMirrored<2>>(7, Adam{});
  CHECK(train_weights<MultiWorkerMirrored<2>>(7, Adam{}) == first);
}

TEST_CASE("a worker whose model differs in shape is an error on every worker, naming both sizes") {
  data::Dataset const data = synthetic(48);
  Trainer<MultiWorkerMirrored<1>> trainer;
  auto fit = [&](auto model) { trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, data, {.batch_size = 12}); };
  using Small = Sequential<Dense<20, 8>, Relu, Dense<8, 5>>;
  std::string const expected = "process 0 (the chief) has " + std::to_string(Mlp::arena_size) +
                               " floats of weights but process 1 has " + std::to_string(Small::arena_size);
  if (world_rank() == 0) {
    CHECK_THROWS_WITH_AS(fit(Mlp(1)), doctest::Contains(expected.c_str()), ConfigError);
  } else {
    CHECK_THROWS_WITH_AS(fit(Small(1)), doctest::Contains(expected.c_str()), ConfigError);
  }
}

int main(int argc, char** argv) {
  comm::MpiEnvironment mpi(argc, argv);
  doctest::Context context(argc, argv);
  int const failed = context.run();
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
