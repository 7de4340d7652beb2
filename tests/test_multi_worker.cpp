// MultiWorkerMirrored<LocalN> across the processes of an MPI job, run under mpirun with 2
// and 3 processes (CTest multi_worker.np2, multi_worker.np3). The oracle is a single-process
// run: MultiWorkerMirrored<LocalN> on P processes against Mirrored<LocalN × P> in one, on the
// same data, seed and batches. Every process runs the same cases in the same order; the exit
// code is the worst over all processes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <numeric>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mpi_world.hpp"
#include "random_matrix.hpp"
#include "rounded_sum_sync.hpp"
#include "strata.hpp"
#include "strata/multi_worker.hpp"

using namespace strata;

namespace {
using Mlp = Sequential<Dense<20, 32>, Relu, Dense<32, 24>, Tanh, Dense<24, 5>>;

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
// Unshuffled fit: the batches in data order, as the oracle below takes them.
template <class... Ps>
std::vector<float> train_in_order(std::uint64_t seed, Adam const& optimizer) {
  Mlp model(seed);
  Trainer<Ps...> trainer;
  trainer.fit(model, optimizer, SoftmaxCrossEntropy{}, synthetic(480), {.epochs = 1, .batch_size = 24, .shuffle = false});
  return {model.parameters().begin(), model.parameters().end()};
}

// The oracle of Compress<T> in one process: Total replica threads whose gradients are rounded
// to T, summed in fp32 and rounded to T, LocalN at a time (a process's threads) and then
// across those sums in order (tests/rounded_sum_sync.hpp).
template <class T, int LocalN, int Total>
std::vector<float> rounded_sum_oracle(std::uint64_t seed, Adam const& optimizer) {
  using Config = policy::Config<Mirrored<Total>>;
  strategy::BasicStrategy<Config> strategy;
  Mlp model(seed);
  train::StepRunner<Config, Mlp, Adam, SoftmaxCrossEntropy, RoundedSumSync<T, Total, LocalN>> runner(
      strategy, model, optimizer, SoftmaxCrossEntropy{}, 24, 0);
  data::Dataset const data = synthetic(480);
  for (int i = 0; i < 20; ++i)
    runner.train_on_batch({data.features().columns(i * 24, 24), data.targets().columns(i * 24, 24), 24, i});
  runner.flush();
  return {model.parameters().begin(), model.parameters().end()};
}

template <class T, int LocalN, int Total>
void check_compressed() {
  Adam const adam{.lr = 1e-2f};
  auto const compressed = train_in_order<MultiWorkerMirrored<LocalN>, Compress<T>>(100 + std::uint64_t(world_rank()), adam);
  CHECK(same_on_every_process(compressed));
  auto const oracle = rounded_sum_oracle<T, LocalN, Total>(100, adam);
  auto const uncompressed = train_in_order<MultiWorkerMirrored<LocalN>>(100, adam);
  CHECK(compressed != uncompressed);  // the gradients crossed rounded to T
  // Shared memory sums in rank order in fp32 and rounds once, within and across processes.
  // MPI (STRATA_SHM_DISABLE=1) rounds at each hop, which only two processes have one of.
  if (std::getenv("STRATA_SHM_DISABLE") == nullptr || world_size() == 2) CHECK(compressed == oracle);
  else CHECK(relative_difference(compressed, oracle) < 0.1);
  // Adam steps each weight by about lr whatever its gradient's size, so where the replicas'
  // gradients cancel, their rounding moves the weight a full step: close, not bf16-close.
  CHECK(relative_difference(compressed, uncompressed) < 0.1);
}
}  // namespace

TEST_CASE_TEMPLATE("Compress<T>: gradients cross the processes as T, as the rounded-sum oracle computes", T, bf16, fp16) {
  if (world_size() == 2) check_compressed<T, 2, 4>();
  else if (world_size() == 3) check_compressed<T, 1, 3>();
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

  // Profiled, the same figures; every worker is handed every worker's batches (9 of 24 samples).
  Profiler profiler({.summary = false});
  auto const profiled = multi.evaluate(model, SoftmaxCrossEntropy{}, data, 24, profiler);
  CHECK(profiled.loss == mine.loss);
  CHECK(*profiled.accuracy == *mine.accuracy);
  auto const& run = profiler.run();
  CHECK(run.activity == "evaluate");
  CHECK(run.process == world_rank());
  CHECK(run.workers == world_size());
  CHECK(run.steps == 9);
  CHECK(run.memory.size() == std::size_t(world_size()));
  for (int w = 0; w < world_size(); ++w)
    for (int r = 0; r < LocalN; ++r) {
      int forwards = 0;
      for (auto const& s : run.spans) forwards += s.worker == w && s.replica == r && s.phase == profile::Phase::forward;
      CHECK(forwards == 9);
    }
  CHECK((multi.predict(model, data, 24, profiler) - outputs).cwiseAbs().maxCoeff() == 0.0f);
  CHECK(profiler.run().activity == "predict");

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

TEST_CASE("a profile window keeps the same steps on every worker, and every worker is handed all of them") {
  Mlp model(3);
  Trainer<MultiWorkerMirrored<1>> trainer;
  Profiler profiler({.summary = false});
  trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, synthetic(480),
              {.epochs = 1, .batch_size = 24, .seed = 5, .profile_steps = {.skip = 7, .steps = 4}}, profiler);
  auto const& run = profiler.run();
  CHECK(run.process == world_rank());
  CHECK(run.workers == world_size());
  CHECK(run.run_steps == 20);
  CHECK(run.steps == 4);
  for (int w = 0; w < world_size(); ++w) {
    std::vector<std::int64_t> steps;
    for (auto const& s : run.spans)
      if (s.worker == w && s.phase == profile::Phase::step) steps.push_back(s.step);
    CHECK(steps == std::vector<std::int64_t>{7, 8, 9, 10});
  }
  for (auto const& s : run.spans) {
    CHECK(s.step >= 7);
    CHECK(s.step <= 10);
  }
  CHECK(run.memory.size() == std::size_t(world_size()));
}

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

  // A sidecar evaluator is one process beside the job: a trainer of the job's processes is
  // refused; a one-process one reads the chief's last checkpoint, the job's final weights.
  SidecarEvaluator const sidecar{.checkpoint = dir / "checkpoints", .until_epochs = 3,
                                 .idle_timeout = std::chrono::seconds(10)};
  Mlp evaluated(6);
  std::string const spans = "SidecarEvaluator: its trainer spans " + std::to_string(world_size()) +
                           " processes; the evaluator is one process";
  CHECK_THROWS_WITH_AS((void)sidecar.run(trainer, evaluated, SoftmaxCrossEntropy{}, data),
                       doctest::Contains(spans.c_str()), ConfigError);
  Trainer<> alone;
  SidecarReport const report = sidecar.run(alone, evaluated, SoftmaxCrossEntropy{}, data);
  REQUIRE(report.evaluations.size() == 1);
  CHECK(report.evaluations[0].step == 12);
  CHECK(report.evaluations[0].evaluation.loss ==
        doctest::Approx(trainer.evaluate(model, SoftmaxCrossEntropy{}, data).loss).epsilon(1e-6));
  CHECK(std::vector<float>(evaluated.parameters().begin(), evaluated.parameters().end()) ==
        std::vector<float>(model.parameters().begin(), model.parameters().end()));
  MPI_Barrier(MPI_COMM_WORLD);

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

namespace {
// A custom training loop (the shape of examples/custom_loop.cpp) written once for any
// strategy: distribute, run with per-replica gradients, all_reduce, each replica updating
// its owned slice; 20 steps of Adam. Returns the weights, the summed losses, and what
// gather returned for the last batch.
struct LoopResult {
  std::vector<float> weights;
  std::vector<double> losses;
  std::vector<int> shard_sizes;
  Matrix features;
  int replicas = 0;
};

template <class S>
LoopResult custom_loop(std::uint64_t seed) {
  using Backend = CpuBackend;
  Mlp model(seed);
  S strategy;
  LoopResult result;
  result.replicas = strategy.num_replicas_in_sync();
  // The loop broadcasts nothing: every worker starts from the same seed here.
  Adam const adam{};
  auto state = adam.make_state(Mlp::arena_size);
  std::vector<Mlp::Workspace<Backend>> workspaces;
  std::vector<AlignedBuffer> gradients;
  for (int r = 0; r < S::num_replicas; ++r) {
    workspaces.emplace_back(24);
    gradients.emplace_back(Mlp::arena_size);
  }
  SoftmaxCrossEntropy const loss;
  std::int64_t step = 0;
  for (auto const& batch : strategy.distribute(synthetic(480).batch(23))) {  // 21 batches, the last of 20
    ++step;
    auto losses = strategy.run(
        [&](auto& ctx, Shard const& shard) {
          int const r = ctx.local_replica_id();
          float* grads = gradients[std::size_t(r)].data();
          float* weights = model.parameters().data();
          model.template forward<Backend>(workspaces[std::size_t(r)], weights, shard.features, {.training = true});
          double const shard_loss =
              loss.forward_backward<Backend>(workspaces[std::size_t(r)].output(), shard.targets,
                                             workspaces[std::size_t(r)].output_gradient(), 1.0f / float(shard.global_batch_size));
          model.template backward<Backend>(workspaces[std::size_t(r)], weights, grads, shard.features, false);
          std::span<float> all(grads, Mlp::arena_size);
          ctx.all_reduce(all, ReduceOp::sum);
          ctx.barrier();  // every replica has read the weights before any slice changes
          auto const slice = ctx.owned_slice(Mlp::arena_size);
          adam.update(model.parameters().subspan(slice.begin, slice.size()), all.subspan(slice.begin, slice.size()),
                      state, slice.begin, step);
          return shard_loss;
        },
        batch);
    result.losses.push_back(strategy.reduce(ReduceOp::sum, losses));
    auto sizes = strategy.run([](auto&, Shard const& shard) { return shard.size; }, batch);
    result.shard_sizes = strategy.gather(sizes);
    auto parts = strategy.run([](auto&, Shard const& shard) { return Matrix(detail::eigen(shard.features)); }, batch);
    result.features = strategy.gather(parts);
  }
  result.weights.assign(model.parameters().begin(), model.parameters().end());
  return result;
}

template <int LocalN, int Total>
void check_custom_loop() {
  auto const multi = custom_loop<Strategy<MultiWorkerMirrored<LocalN>>>(9);
  auto const single = custom_loop<Strategy<Mirrored<Total>>>(9);
  CHECK(multi.replicas == Total);
  CHECK(relative_difference(multi.weights, single.weights) < 1e-5);
  CHECK(same_on_every_process(multi.weights));
  REQUIRE(multi.losses.size() == single.losses.size());
  for (std::size_t i = 0; i < multi.losses.size(); ++i) CHECK(multi.losses[i] == doctest::Approx(single.losses[i]).epsilon(1e-6));
  CHECK(multi.shard_sizes == single.shard_sizes);  // the last batch of 20, over every replica of the job
  CHECK(multi.features == single.features);        // every shard's columns, in replica order
  Strategy<MultiWorkerMirrored<LocalN>> strategy;
  auto ids = strategy.run([](auto& ctx) { return ctx.replica_id_in_sync_group(); });
  CHECK(strategy.gather(ids) == [] {
    std::vector<int> all(Total);
    for (int i = 0; i < Total; ++i) all[std::size_t(i)] = i;
    return all;
  }());
  CHECK(strategy.reduce(ReduceOp::max, ids) == Total - 1);
  CHECK(strategy.reduce(ReduceOp::mean, strategy.run([](auto&) { return 1.0; })) == 1.0);
  // A batch split for another number of replicas is refused, not mis-sharded.
  data::BatchedDataset const batches = synthetic(48).batch(24);
  CHECK_THROWS_AS(strategy.run([](auto&, Shard const&) { return 0; }, DistributedBatch(*batches.begin(), LocalN)),
                  ConfigError);
}
}  // namespace

TEST_CASE("Strategy<MultiWorkerMirrored> runs custom loops across processes: distribute, run, reduce, gather") {
  if (world_size() == 2) check_custom_loop<2, 4>();
  else if (world_size() == 3) check_custom_loop<1, 3>();
}

TEST_CASE("LoopProfiler across processes: every worker is handed every worker's steps and replicas' runs") {
  Strategy<MultiWorkerMirrored<2>> strategy;
  Profiler profiler({.summary = false});
  LoopProfiler loop(strategy);
  for (auto const& batch : strategy.distribute(synthetic(96).batch(8 * world_size()))) {
    auto const step = loop.step();
    strategy.run([](auto& ctx, Shard const& shard) {
      float n[1] = {float(shard.size)};
      ctx.all_reduce(std::span<float>(n), ReduceOp::sum);
    }, batch);
  }
  loop.finish(profiler);
  auto const& run = profiler.run();
  CHECK(run.activity == "custom loop");
  CHECK(run.process == world_rank());
  CHECK(run.workers == world_size());
  CHECK(run.world == 2 * world_size());
  std::int64_t const steps = (96 + 8 * world_size() - 1) / (8 * world_size());
  CHECK(run.steps == steps);
  for (int w = 0; w < world_size(); ++w)
    for (int r = 0; r < 2; ++r) {
      std::int64_t runs = 0, reduces = 0;
      for (auto const& s : run.spans) {
        runs += s.worker == w && s.replica == r && s.phase == profile::Phase::run;
        reduces += s.worker == w && s.replica == r && s.phase == profile::Phase::all_reduce && s.bytes == 4;
      }
      CHECK(runs == steps);
      CHECK(reduces == steps);  // each run's all_reduce, timed on every worker
    }
  REQUIRE(profiler.report().collectives);
  CHECK(profiler.report().collectives->count == 2 * world_size() * steps);
}

namespace {
struct OnBatchEnd {
  std::function<void(BatchLogs const&)> call;
  void on_batch_end(BatchLogs const& logs) { call(logs); }
};

// With dropout: its masks follow each sample's position in the global batch, so a worker's
// local batch must know its offset in it.
using DropoutMlp = Sequential<Dense<20, 32>, Relu, Dropout, Dense<32, 5>>;

// Worker p's own data: samples [starts[p], starts[p+1]) of `all` (uneven on purpose).
data::Dataset columns_of(data::Dataset const& all, std::size_t first, std::size_t count) {
  return all.skip(first).take(count);
}

// PerWorker input (distribute_datasets_from_function) against its oracle: one process
// training Mirrored<Total> on the global batches the workers' local batches make together
// (each step: every worker's next b samples, in worker order; fewer, then none, once a
// worker's data runs out), fed to the step runner batch by batch.
template <int LocalN, int Total>
void check_per_worker_input() {
  int const workers = world_size(), me = world_rank();
  data::Dataset const all = synthetic(500);
  int const global = 8 * workers;  // local batches of 8
  int const local = global / workers;
  std::vector<std::size_t> sizes;  // worker p holds 150 - 23 p samples: its epoch ends earlier
  std::vector<std::size_t> starts{0};
  for (int p = 0; p < workers; ++p) {
    sizes.push_back(150 - 23 * std::size_t(p));
    starts.push_back(starts.back() + sizes.back());
  }
  auto input = PerWorker{[&](InputContext const& context) {
    CHECK(context.num_input_pipelines == workers);
    CHECK(context.input_pipeline_id == me);
    CHECK(context.num_replicas_in_sync == Total);
    CHECK(context.per_replica_batch_size(global) == global / Total);
    return columns_of(all, starts[std::size_t(context.input_pipeline_id)], sizes[std::size_t(context.input_pipeline_id)]);
  }};
  DropoutMlp model(21);
  Trainer<MultiWorkerMirrored<LocalN>> trainer;
  std::vector<std::int64_t> steps;
  auto const history = trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, input,
                                   {.epochs = 1, .batch_size = global, .shuffle = false},
                                   OnBatchEnd{[&](BatchLogs const& logs) { steps.push_back(logs.step); }});
  std::int64_t const expected_steps = (std::int64_t(sizes[0]) + local - 1) / local;  // worker 0 has the most
  std::vector<std::int64_t> one_to_last(static_cast<std::size_t>(expected_steps));
  std::iota(one_to_last.begin(), one_to_last.end(), 1);
  CHECK(steps == one_to_last);  // every worker, the ones past their data too, counts each step once

  // The oracle: the same global batches, built by hand, in one process.
  DropoutMlp oracle_model(21);
  Strategy<Mirrored<Total>> strategy;
  train::StepRunner<typename Strategy<Mirrored<Total>>::config, DropoutMlp, Adam, SoftmaxCrossEntropy> runner(
      strategy, oracle_model, Adam{}, SoftmaxCrossEntropy{}, global, 0);
  double loss_sum = 0.0;
  std::int64_t samples = 0;
  for (std::int64_t s = 0; s < expected_steps; ++s) {
    std::vector<std::size_t> picked;
    for (int p = 0; p < workers; ++p)
      for (std::size_t j = std::size_t(s) * std::size_t(local); j < std::min(sizes[std::size_t(p)], std::size_t(s + 1) * std::size_t(local)); ++j)
        picked.push_back(starts[std::size_t(p)] + j);
    Matrix x(all.feature_width(), Eigen::Index(picked.size())), y(all.target_width(), Eigen::Index(picked.size()));
    for (std::size_t j = 0; j < picked.size(); ++j) {
      x.col(Eigen::Index(j)) = detail::eigen(all.features()).col(Eigen::Index(picked[j]));
      y.col(Eigen::Index(j)) = detail::eigen(all.targets()).col(Eigen::Index(picked[j]));
    }
    data::Batch const batch{{x.data(), int(x.rows()), int(x.cols())}, {y.data(), int(y.rows()), int(y.cols())},
                            int(picked.size()), s};
    auto const tally = runner.train_on_batch(batch);
    loss_sum += tally.loss_sum;
    samples += tally.samples;
  }
  CHECK(samples == std::int64_t(starts.back()));  // every sample once
  std::vector<float> const mine(model.parameters().begin(), model.parameters().end());
  std::vector<float> const expected(oracle_model.parameters().begin(), oracle_model.parameters().end());
  CHECK(relative_difference(mine, expected) < 1e-5);
  CHECK(same_on_every_process(mine));
  CHECK(history["loss"][0] == doctest::Approx(loss_sum / double(samples)).epsilon(1e-5));
}

}  // namespace

TEST_CASE("per-worker input: each worker trains on its own data, uneven sizes included, as one process would") {
  if (world_size() == 2) check_per_worker_input<2, 4>();
  else if (world_size() == 3) check_per_worker_input<1, 3>();
}

// Epochs of S steps across processes: S steps of pass after pass, each reshuffled, from the
// global data every worker shards and from each worker's own (whose passes are as long as
// the longest worker's: 96 samples in batches of 8, 12 steps). The oracle: the same job
// trained pass by pass, over as many steps (2 passes), bit for bit.
TEST_CASE("steps_per_epoch across processes: the workers agree on each epoch's steps, and whole passes train the same") {
  if (world_size() < 2) return;
  int const workers = world_size();
  auto const train = [&](auto const& input, int epochs, std::int64_t steps_per_epoch, int batch_size) {
    DropoutMlp model(21);
    Trainer<MultiWorkerMirrored<1>> trainer;
    std::vector<std::int64_t> steps;
    trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, input,
                {.epochs = epochs, .batch_size = batch_size, .seed = 4, .steps_per_epoch = steps_per_epoch},
                OnBatchEnd{[&](BatchLogs const& logs) { steps.push_back(logs.step); }});
    return std::pair{std::vector<float>(model.parameters().begin(), model.parameters().end()), steps};
  };
  // Global data: 200 samples at 16, passes of 13 steps; epochs of 2 steps.
  auto const shared_passes = train(synthetic(200), 2, 0, 16).first;
  auto const [shared_epochs, shared_steps] = train(synthetic(200), 13, 2, 16);
  CHECK(shared_epochs == shared_passes);
  CHECK(shared_steps.size() == 26);
  CHECK(same_on_every_process(shared_epochs));
  // Each worker's own: worker p holds 96 - 20 p samples.
  data::Dataset const all = synthetic(400);
  auto input = PerWorker{[&](InputContext const& context) {
    std::size_t const p = std::size_t(context.input_pipeline_id);
    return columns_of(all, 100 * p, 96 - 20 * p);
  }};
  auto const own_passes = train(input, 2, 0, 8 * workers).first;
  auto const [own_epochs, own_steps] = train(input, 3, 8, 8 * workers);  // epoch 1 crosses a pass's end
  CHECK(own_epochs == own_passes);
  CHECK(own_steps == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(same_on_every_process(own_epochs));
}

TEST_CASE("Strategy::distribute_datasets_from_function: every sample once per epoch, uneven workers never hang") {
  int const workers = world_size();
  // Sample i carries i in its first feature; worker p holds 40 - 7 p of them.
  std::vector<std::int64_t> starts{0};
  for (int p = 0; p < workers; ++p) starts.push_back(starts.back() + 40 - 7 * p);
  Matrix x = Matrix::Zero(20, Eigen::Index(starts.back()));
  for (Eigen::Index i = 0; i < x.cols(); ++i) x(0, i) = float(i);
  data::Dataset const all(x, std::vector<std::int32_t>(std::size_t(x.cols()), 0));
  Strategy<MultiWorkerMirrored<2>> strategy;
  int const global = 6 * workers;
  auto batches = strategy.distribute_datasets_from_function(
      [&](InputContext const& context) {
        auto const p = std::size_t(context.input_pipeline_id);
        return all.skip(std::size_t(starts[p])).take(std::size_t(starts[p + 1] - starts[p]));
      },
      global);
  CHECK(batches.batches_per_epoch() == (40 + 5) / 6);  // worker 0 has the most
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> seen;
    std::int64_t steps = 0;
    for (auto const& batch : batches) {
      ++steps;
      auto parts = strategy.run([](auto&, Shard const& shard) { return Matrix(detail::eigen(shard.features)); }, batch);
      auto firsts = strategy.run([](auto&, Shard const& shard) { return shard.first_sample; }, batch);
      auto totals = strategy.run([](auto&, Shard const& shard) { return shard.global_batch_size; }, batch);
      Matrix const columns = strategy.gather(parts);
      CHECK(columns.cols() == batch.size());
      int offset = 0;
      auto const first = strategy.gather(firsts);
      auto const sizes = strategy.gather(strategy.run([](auto&, Shard const& shard) { return shard.size; }, batch));
      for (std::size_t r = 0; r < first.size(); ++r) {
        CHECK(first[r] == offset);  // each shard knows its place in the global batch
        offset += sizes[r];
      }
      for (int t : strategy.gather(totals)) CHECK(t == batch.size());
      for (Eigen::Index j = 0; j < columns.cols(); ++j) seen.push_back(int(columns(0, j)));
    }
    CHECK(steps == batches.batches_per_epoch());
    std::sort(seen.begin(), seen.end());
    std::vector<int> expected(std::size_t(starts.back()));
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(seen == expected);
  }
  // A worker whose input fails: every worker throws that worker's error.
  auto failing = [&](InputContext const& context) {
    if (context.input_pipeline_id == workers - 1) throw IoError("no such file: part-9.csv");
    return all;
  };
  CHECK_THROWS_WITH_AS((void)strategy.distribute_datasets_from_function(failing, global),
                       "no such file: part-9.csv", IoError);
}

TEST_CASE("AutoShard::file and AutoShard::off through PerWorker; a bad input fails every worker") {
  int const workers = world_size(), me = world_rank();
  std::filesystem::path const dir = std::filesystem::temp_directory_path() / "strata_multi_worker_files";
  if (me == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    for (int f = 0; f < 5; ++f) {  // 5 files of 10 + f rows: 20 features, the label last
      std::ofstream out(dir / ("part-" + std::to_string(f) + ".csv"));
      for (int row = 0; row < 10 + f; ++row) {
        for (int c = 0; c < 20; ++c) out << float((f * 7 + row * 3 + c) % 11) / 11.0f << ',';
        out << (f + row) % 5 << '\n';
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<std::filesystem::path> files;
  for (int f = 0; f < 5; ++f) files.push_back(dir / ("part-" + std::to_string(f) + ".csv"));

  // AutoShard::file: worker p reads files p, p + workers, ...; together they read each once.
  std::size_t my_rows = 0;
  auto by_file = PerWorker{[&](InputContext const& context) {
    auto const mine = files_for_worker(files, context);
    for (std::size_t i = 0; i < mine.size(); ++i) CHECK(mine[i] == files[std::size_t(me) + i * std::size_t(workers)]);
    auto data = data::read_csv(mine);
    my_rows = data.size();
    return data;
  }};
  Trainer<MultiWorkerMirrored<1>> trainer;
  Mlp model(5);
  trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, by_file, {.epochs = 2, .batch_size = 4 * workers});
  double rows = double(my_rows);
  MPI_Allreduce(MPI_IN_PLACE, &rows, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  CHECK(rows == 10 + 11 + 12 + 13 + 14);
  CHECK(same_on_every_process({model.parameters().begin(), model.parameters().end()}));

  // Fewer files than workers.
  std::vector<std::filesystem::path> const one(files.begin(), files.begin() + 1);
  CHECK_THROWS_WITH_AS(files_for_worker(one, {workers, me, workers}), doctest::Contains("1 files for"), DataError);

  // AutoShard::off: every worker trains on all of it, each in its own order.
  data::Dataset const whole = data::read_csv(files);
  std::int64_t steps = 0;
  auto everything = PerWorker{[&](InputContext const&) { return whole; }};
  trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, everything, {.epochs = 1, .batch_size = 5 * workers},
              OnBatchEnd{[&](BatchLogs const& logs) { steps = logs.step; }});
  CHECK(steps == (std::int64_t(whole.size()) + 4) / 5);

  // A global batch that does not divide over the workers, and a worker without data: the
  // same error on every worker, no hang.
  CHECK_THROWS_WITH_AS(trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, everything, {.batch_size = 4 * workers + 1}),
                       doctest::Contains("does not divide over"), ConfigError);
  auto none_on_last = PerWorker{[&](InputContext const& context) {
    return context.input_pipeline_id == workers - 1 ? whole.take(0) : whole;
  }};
  CHECK_THROWS_WITH_AS(trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, none_on_last, {.batch_size = 4 * workers}),
                       doctest::Contains("an empty dataset"), DataError);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) std::filesystem::remove_all(dir);
}

int main(int argc, char** argv) {
  comm::MpiEnvironment mpi(argc, argv);
  doctest::Context context(argc, argv);
  int const failed = context.run();
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
