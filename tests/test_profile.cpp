// Monitoring (profile/): the probe's spans against the step's structure, the figures
// against closed forms, a profiled run against an unprofiled one (same weights), the trace
// file against an independent JSON parser.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <strata.hpp>

#include "temp_dir.hpp"

using namespace strata;

namespace {
using Model = Sequential<Dense<784, 32>, Relu, Dense<32, 10>>;

Dataset const& fashion() {
  static Dataset const data = data::fashion_mnist(data::Split::train).take(600);
  return data;
}

template <class T, class... Cs>
std::vector<float> fit_weights(FitOptions options, Cs&&... callbacks) {
  Model model(42);
  T trainer;
  trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, fashion(), options, std::forward<Cs>(callbacks)...);
  return {model.parameters().begin(), model.parameters().end()};
}

// Counts spans per (phase, replica).
std::map<std::pair<profile::Phase, int>, int> census(profile::RunProfile const& run) {
  std::map<std::pair<profile::Phase, int>, int> out;
  for (auto const& s : run.spans) ++out[{s.phase, s.replica}];
  return out;
}
}  // namespace

TEST_CASE("percentiles are nearest-rank and bus bandwidth is nccl-tests' (closed forms)") {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(double(i));
  auto const p = profile::percentiles(values);
  CHECK(p.p50 == 50.0);
  CHECK(p.p90 == 90.0);
  CHECK(p.p99 == 99.0);
  auto const one = profile::percentiles({7.0});
  CHECK((one.p50 == 7.0 && one.p99 == 7.0));
  // 1 GB in 1 s over 4 ranks: each link carries 2 (n - 1) / n of it.
  CHECK(profile::bus_bandwidth(1e9, 1.0, 4) == doctest::Approx(1.5e9));
  CHECK(profile::bus_bandwidth(1e9, 1.0, 1) == 0.0);
}

TEST_CASE("a profiled fit trains the same weights and times every phase of every step, nested in its step") {
  FitOptions const options{.epochs = 2, .batch_size = 100, .validation = fashion().take(200), .seed = 3};
  auto const plain = fit_weights<Trainer<Mirrored<2>>>(options);
  Profiler profiler({.summary = false});
  auto const profiled = fit_weights<Trainer<Mirrored<2>>>(options, profiler);
  CHECK(profiled == plain);  // timing changes nothing the step computes

  auto const& run = profiler.run();
  CHECK(run.workers == 1);
  CHECK(run.local_replicas == 2);
  CHECK(run.world == 2);
  CHECK(run.steps == 12);  // 600 / 100 per epoch, 2 epochs
  CHECK(run.config.find("Mirrored<2>") != std::string::npos);
  auto const count = census(run);
  using P = profile::Phase;
  for (int r = 0; r < 2; ++r)
    for (P p : {P::forward, P::backward, P::gradient_wait, P::update}) CHECK(count.at({p, r}) == 12);
  for (P p : {P::data_wait, P::step, P::callbacks}) CHECK(count.at({p, -1}) == 12);
  CHECK(count.at({P::validation, -1}) == 2);
  CHECK(count.count({P::all_reduce, 0}) == 0);  // Mirrored on the CPU sums in place

  // Every replica phase lies inside its step's span, in order: forward, backward, wait, update.
  std::map<std::int64_t, profile::Span> steps;
  for (auto const& s : run.spans)
    if (s.phase == P::step) steps[s.step] = s;
  CHECK(steps.size() == 12);
  for (auto const& s : run.spans) {
    CHECK(s.end_ns >= s.begin_ns);
    if (s.replica < 0) continue;
    auto const& step = steps.at(s.step);
    CHECK(s.begin_ns >= step.begin_ns);
    CHECK(s.end_ns <= step.end_ns);
  }
  std::map<std::tuple<std::int64_t, int, P>, profile::Span> by;
  for (auto const& s : run.spans) by[{s.step, s.replica, s.phase}] = s;
  for (std::int64_t k = 0; k < 12; ++k)
    for (int r = 0; r < 2; ++r) {
      CHECK(by[{k, r, P::forward}].end_ns == by[{k, r, P::backward}].begin_ns);
      CHECK(by[{k, r, P::backward}].end_ns <= by[{k, r, P::gradient_wait}].begin_ns);
      CHECK(by[{k, r, P::gradient_wait}].end_ns == by[{k, r, P::update}].begin_ns);
    }

  // The report: the loop's phases add up to the wall time; the replica phases fit in the steps.
  auto const& report = profiler.report();
  CHECK(report.steps == 12);
  double const step_seconds = *report.seconds_of(P::step);
  CHECK(report.wall_seconds >= step_seconds);
  CHECK(*report.seconds_of(P::forward) + *report.seconds_of(P::backward) <= step_seconds);
  CHECK(report.replicas.size() == 2);
  CHECK_FALSE(report.collectives);

  // Memory: the arena (tensors padded to cache lines) is the weights, one gradient arena per
  // replica and Adam's two moments.
  std::int64_t const floats = std::int64_t(Model(1).parameters().size());
  CHECK(report.memory.arena == floats * 4 * (1 + 2 + 2));
  CHECK(report.memory.activations > 0);
  CHECK(report.memory.workspaces >= report.memory.activations);
  CHECK(report.memory.peak_rss >= report.memory.rss);
  CHECK(report.memory.rss > 0);
  CHECK(report.memory.device == -1);

  std::string const table = report.table();
  for (char const* part : {"Profile - 2 replicas (1 worker) - 12 steps", "forward", "backward", "gradient wait",
                           "all-reduce - none", "memory - peak RSS"})
    CHECK_MESSAGE(table.find(part) != std::string::npos, part, " in\n", table);
}

TEST_CASE("the summary is printed at the end of fit on request, and not when turned off") {
  std::ostringstream on, off;
  FitOptions const options{.epochs = 1, .batch_size = 200};
  fit_weights<Trainer<OneDevice>>(options, Profiler({.out = &on}));
  fit_weights<Trainer<OneDevice>>(options, Profiler({.summary = false, .out = &off}));
  CHECK(on.str().find("Profile - 1 replica (1 worker) - 3 steps") == 0);
  CHECK(off.str().empty());
}

TEST_CASE("FitOptions::profile_steps keeps the spans of a window of steps; on_step_profile still sees every step") {
  struct StepCounter {
    std::int64_t steps = 0;
    void on_step_profile(profile::StepProfile const& p) { steps += p.spans.empty() ? 0 : 1; }
  };
  // 600 samples in batches of 50: 12 steps an epoch, 24 in two; keep steps 5 to 14.
  FitOptions options{.epochs = 2, .batch_size = 50, .validation = fashion().take(200), .seed = 3,
                     .profile_steps = {.skip = 5, .steps = 10}};
  Profiler profiler({.summary = false});
  StepCounter counter;
  auto const windowed = fit_weights<Trainer<Mirrored<2>>>(options, profiler, counter);
  options.profile_steps = {};
  CHECK(windowed == fit_weights<Trainer<Mirrored<2>>>(options));
  CHECK(counter.steps == 24);

  auto const& run = profiler.run();
  CHECK(run.steps == 10);
  CHECK(run.first_step == 5);
  CHECK(run.run_steps == 24);
  std::map<profile::Phase, std::set<std::int64_t>> steps_of;
  for (auto const& s : run.spans) {
    CHECK(s.step >= 5);
    CHECK(s.step < 15);
    steps_of[s.phase].insert(s.step);
  }
  auto const count = census(run);
  using P = profile::Phase;
  for (int r = 0; r < 2; ++r)
    for (P p : {P::forward, P::backward, P::gradient_wait, P::update}) CHECK(count.at({p, r}) == 10);
  for (P p : {P::data_wait, P::step, P::callbacks}) {
    CHECK(count.at({p, -1}) == 10);
    CHECK(steps_of[p].size() == 10);
  }
  CHECK(count.at({P::validation, -1}) == 1);  // the first epoch's ends at step 11; the second's, at 23, is outside

  auto const& report = profiler.report();
  CHECK(report.steps == 10);
  CHECK(report.seconds_of(P::forward).value_or(0.0) > 0.0);
  CHECK_MESSAGE(report.table().find("Profile - 2 replicas (1 worker) - steps 6-15 of 24") == 0, report.table());

  // A window past the end keeps nothing and says so.
  Profiler late({.summary = false});
  fit_weights<Trainer<OneDevice>>({.epochs = 1, .batch_size = 100, .profile_steps = {.skip = 100}}, late);
  CHECK(late.run().spans.empty());
  CHECK(late.report().steps == 0);
  CHECK_MESSAGE(late.report().table().find("no step profiled: profile_steps skips 100 steps, the fit trained 6") !=
                    std::string::npos,
                late.report().table());

  // A window that repeats: 3 of every 5 steps after the first 2 (steps 2-4, 7-9, ... 22-23).
  Profiler sampled({.summary = false});
  options.profile_steps = {.skip = 2, .steps = 3, .every = 5};
  options.validation.reset();
  fit_weights<Trainer<Mirrored<2>>>(options, sampled);
  std::set<std::int64_t> sampled_steps;
  for (auto const& s : sampled.run().spans) sampled_steps.insert(s.step);
  CHECK(sampled_steps == std::set<std::int64_t>{2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19, 22, 23});
  CHECK(sampled.run().steps == 14);
  CHECK(census(sampled.run()).at({P::forward, 1}) == 14);
  CHECK_MESSAGE(sampled.report().table().find("Profile - 2 replicas (1 worker) - 3 of every 5 steps from step 3: 14 of 24") == 0,
                sampled.report().table());
  CHECK((profile::StepWindow{.skip = 2, .steps = 3, .every = 5}.kept_of(25) == 15));  // 23 steps after the skip: 4 × 3 + 3
  CHECK((profile::StepWindow{.skip = 2, .steps = 3, .every = 5}.kept_of(2) == 0));

  // The last steps only: the window's end need not be named.
  Profiler tail({.summary = false});
  fit_weights<Trainer<OneDevice>>({.epochs = 1, .batch_size = 100, .profile_steps = {.skip = 4}}, tail);
  CHECK(tail.report().steps == 2);
  CHECK(census(tail.run()).at({P::step, -1}) == 2);
}

TEST_CASE("evaluate and predict under a Profiler or TraceWriter time every batch and every replica's forward pass") {
  Model model(42);
  Trainer<Mirrored<2>> trainer;
  auto const& data = fashion();
  auto const plain = trainer.evaluate(model, SoftmaxCrossEntropy{}, data, 100);
  std::ostringstream out;
  Profiler profiler({.out = &out});
  auto const profiled = trainer.evaluate(model, SoftmaxCrossEntropy{}, data, 100, profiler);
  CHECK(profiled.loss == plain.loss);  // timing changes nothing computed
  CHECK(*profiled.accuracy == *plain.accuracy);

  auto const& run = profiler.run();
  CHECK(run.activity == "evaluate");
  CHECK(run.steps == 6);  // 600 samples in batches of 100
  using P = profile::Phase;
  auto const count = census(run);
  CHECK(count.at({P::forward, 0}) == 6);
  CHECK(count.at({P::forward, 1}) == 6);
  CHECK(count.at({P::data_wait, -1}) == 6);
  CHECK(count.at({P::step, -1}) == 6);
  CHECK(count.size() == 4);  // no backward, update or collective
  std::map<std::int64_t, profile::Span> batches;
  for (auto const& s : run.spans)
    if (s.phase == P::step) batches[s.step] = s;
  for (auto const& s : run.spans)
    if (s.phase == P::forward) {  // inside its batch
      CHECK(s.begin_ns >= batches.at(s.step).begin_ns);
      CHECK(s.end_ns <= batches.at(s.step).end_ns);
    }
  auto const& report = profiler.report();
  CHECK(report.memory.arena == std::int64_t(Model(1).parameters().size() * sizeof(float)));  // the weights it reads
  CHECK(report.memory.workspaces > 0);
  std::string const table = out.str();
  CHECK_MESSAGE(table.find("Profile of evaluate - 2 replicas (1 worker) - 6 batches") == 0, table);
  CHECK(table.find("ms/batch") != std::string::npos);
  CHECK(table.find("forward per replica") != std::string::npos);
  CHECK(table.find("all-reduce") == std::string::npos);

  TempDir const scratch;
  auto const path = scratch.path / "predict.json";
  Matrix const outputs = trainer.predict(model, data, 128, TraceWriter{path}, profiler);
  CHECK(outputs == trainer.predict(model, data, 128));
  CHECK(profiler.run().activity == "predict");
  CHECK(profiler.run().steps == 5);  // 600 in batches of 128: the last holds 88
  std::ifstream in(path);
  auto const trace = nlohmann::json::parse(in);
  CHECK(trace["otherData"]["activity"] == "predict");
  int forwards = 0;
  for (auto const& e : trace["traceEvents"]) forwards += e["name"] == "forward";
  CHECK(forwards == 10);
}

TEST_CASE("a restored fit counts its profile window from where it restarts") {
  struct CrashAt {  // a crash fit cannot catch, after the backup at step `step`
    std::int64_t step;
    void on_batch_end(BatchLogs const&, io::TrainingState const& s) {
      if (s.progress.step == step) throw std::runtime_error("simulated crash");
    }
  };
  TempDir const scratch;
  BackupAndRestore backup{.directory = scratch.path / "backup", .every_steps = 4};
  FitOptions const options{.epochs = 2, .batch_size = 100, .seed = 5, .profile_steps = {.skip = 2, .steps = 3}};
  Model model(42);
  CHECK_THROWS_WITH(Trainer<OneDevice>().fit(model, Adam{}, SoftmaxCrossEntropy{}, fashion(), options, backup, CrashAt{4}),
                    "simulated crash");
  Profiler profiler({.summary = false});
  Trainer<OneDevice>().fit(model, Adam{}, SoftmaxCrossEntropy{}, fashion(), options, backup, profiler);
  REQUIRE(backup.restored);
  auto const& run = profiler.run();
  CHECK(run.run_steps == 8);  // 12 steps in two epochs, 4 of them before the crash
  CHECK(run.steps == 3);
  for (auto const& s : run.spans) {  // the run's micro-batches 4 + 2 to 4 + 4
    CHECK(s.step >= 6);
    CHECK(s.step <= 8);
  }
  CHECK(census(run).at({profile::Phase::step, -1}) == 3);
}

TEST_CASE("LoopProfiler times a custom loop's steps and every replica's run function, and leaves the results alone") {
  auto const& data = fashion();
  auto loop_body = [](auto& ctx, Shard const& shard) {  // the shard's feature sum, all-reduced: a real collective
    float sum[1] = {std::accumulate(shard.features.data, shard.features.data + shard.features.size(), 0.0f)};
    ctx.all_reduce(std::span<float>(sum), ReduceOp::sum);
    return double(sum[0]);
  };
  Strategy<Mirrored<2>> strategy;
  std::vector<double> plain;
  for (auto const& batch : strategy.distribute(data.batch(100))) plain.push_back(strategy.run(loop_body, batch)[0]);

  std::ostringstream out;
  Profiler profiler({.out = &out});
  std::vector<double> profiled;
  {
    LoopProfiler loop(strategy);
    CHECK(strategy.probe_attached());
    for (auto const& batch : strategy.distribute(data.batch(100))) {
      auto const step = loop.step();
      CHECK_THROWS_WITH_AS((void)loop.step(), doctest::Contains("the previous step is still open"), ConfigError);
      profiled.push_back(strategy.run(loop_body, batch)[1]);
    }
    strategy.run([](auto&) {});  // outside a step: timed, counted with the last step
    loop.finish(profiler);
    CHECK_FALSE(strategy.probe_attached());
    CHECK_THROWS_WITH_AS(loop.finish(profiler), doctest::Contains("already finished"), ConfigError);
  }
  CHECK(profiled == plain);  // every replica's all-reduced sum, the same with the probe

  auto const& run = profiler.run();
  CHECK(run.activity == "custom loop");
  CHECK(run.steps == 6);
  CHECK(run.config.find("Mirrored<2>") != std::string::npos);
  using P = profile::Phase;
  auto const count = census(run);
  CHECK(count.at({P::step, -1}) == 6);
  CHECK(count.at({P::data_wait, -1}) == 6);
  CHECK(count.at({P::run, 0}) == 7);
  CHECK(count.at({P::run, 1}) == 7);
  CHECK(count.at({P::all_reduce, 0}) == 6);  // the loop body's one all_reduce per step
  CHECK(count.at({P::all_reduce, 1}) == 6);
  CHECK(count.size() == 6);
  std::map<std::int64_t, profile::Span> steps;
  std::map<std::tuple<std::int64_t, int>, profile::Span> runs;  // by step and replica
  for (auto const& s : run.spans)
    if (s.phase == P::step) steps[s.step] = s;
  for (auto const& s : run.spans)
    if (s.phase == P::run && s.end_ns <= steps.at(5).end_ns) {  // the runs inside steps lie inside them
      CHECK(s.begin_ns >= steps.at(s.step).begin_ns);
      CHECK(s.end_ns <= steps.at(s.step).end_ns);
      runs[{s.step, s.replica}] = s;
    }
  for (auto const& s : run.spans)
    if (s.phase == P::all_reduce) {  // each call inside its replica's run, with its bytes and index
      auto const& in = runs.at({s.step, s.replica});
      CHECK(s.begin_ns >= in.begin_ns);
      CHECK(s.end_ns <= in.end_ns);
      CHECK(s.bytes == 4);
      CHECK(s.bucket == 0);
    }
  REQUIRE(profiler.report().collectives);
  auto const& collectives = *profiler.report().collectives;
  CHECK(collectives.count == 12);
  CHECK(collectives.buckets_per_step == 1);
  CHECK(collectives.bytes_per_step == 4.0);
  CHECK(collectives.latency_ms.p50 > 0.0);
  std::string const table = out.str();
  CHECK_MESSAGE(table.find("Profile of custom loop - 2 replicas (1 worker) - 6 steps") == 0, table);
  CHECK(table.find("run per replica") != std::string::npos);
  CHECK(table.find("  all-reduce - 1 call/step - p50 ") != std::string::npos);
  CHECK(table.find("hidden behind backward") == std::string::npos);  // a loop's collectives are its own code
  CHECK(profile::chrome_trace(run).find("\"name\":\"all-reduce call 0\"") != std::string::npos);
  CHECK(table.find("arena") == std::string::npos);  // a custom loop's buffers are its own

  // A window; a second profiler on a profiled strategy; untimed once it is gone.
  {
    Profiler windowed({.summary = false});
    LoopProfiler loop(strategy, {.skip = 2, .steps = 2});
    CHECK_THROWS_WITH_AS(LoopProfiler{strategy}, doctest::Contains("already profiled by another LoopProfiler"),
                         ConfigError);
    for (int i = 0; i < 5; ++i) {
      auto const step = loop.step();
      strategy.run([](auto&) {});
    }
    loop.finish(windowed);
    CHECK(windowed.run().steps == 2);
    CHECK(windowed.run().run_steps == 5);
    CHECK(census(windowed.run()).at({P::run, 0}) == 2);
  }
  {
    Profiler late({.summary = false});
    LoopProfiler loop(strategy, {.skip = 9});
    for (int i = 0; i < 3; ++i) auto const step = loop.step();
    loop.finish(late);
    CHECK(late.run().spans.empty());
    CHECK_MESSAGE(late.report().table().find("no step profiled: the window skips 9 steps, the loop ran 3") !=
                      std::string::npos,
                  late.report().table());
  }
  CHECK_FALSE(strategy.probe_attached());
  CHECK_THROWS_AS((LoopProfiler{strategy, {.steps = 0}}), ConfigError);
}

TEST_CASE("a profile window that cannot hold a step is a ConfigError naming the value") {
  Model model(1);
  Trainer<OneDevice> trainer;
  auto fit = [&](profile::StepWindow window) {
    trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion().take(100), {.batch_size = 100, .profile_steps = window},
                Profiler({.summary = false}));
  };
  CHECK_THROWS_WITH_AS(fit({.skip = -1}), doctest::Contains("profile_steps.skip -1 must be >= 0"), ConfigError);
  CHECK_THROWS_WITH_AS(fit({.steps = 0}), doctest::Contains("profile_steps.steps 0 must be >= 1"), ConfigError);
  CHECK_THROWS_WITH_AS(fit({.steps = 10, .every = 5}),
                       doctest::Contains("profile_steps.every 5 must be 0 (one window) or at least .steps 10 (windows would overlap)"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(fit({.every = 100}), doctest::Contains("(set .steps: the steps profiled in each period)"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(fit({.steps = 1, .every = -1}), doctest::Contains("profile_steps.every -1 must be 0"), ConfigError);
}

TEST_CASE("step profiles come before on_batch_end with this step's spans, the learning rate and memory") {
  struct Recorder {
    std::vector<std::int64_t> steps;
    std::vector<std::size_t> spans;
    std::vector<double> rates;
    int batch_ends = 0;
    bool ordered = true;
    void on_step_profile(profile::StepProfile const& p) {
      ordered &= int(steps.size()) == batch_ends;
      steps.push_back(p.step);
      spans.push_back(p.spans.size());
      rates.push_back(p.learning_rate);
      CHECK(p.memory.peak_rss > 0);
      CHECK(p.world == 2);
      CHECK_FALSE(p.loss_scale);
    }
    void on_batch_end(BatchLogs const&) { ++batch_ends; }
  } recorder;
  Model model(1);
  Trainer<Mirrored<2>> trainer;
  auto const optimizer = scheduled(Sgd{.lr = 0.1f}, WarmupLinearDecay{.warmup_steps = 2, .total_steps = 4});
  trainer.fit(model, optimizer, SoftmaxCrossEntropy{}, fashion().take(400), {.epochs = 1, .batch_size = 100},
              recorder);
  CHECK(recorder.ordered);
  CHECK(recorder.steps == std::vector<std::int64_t>{1, 2, 3, 4});
  // The first step: data wait, step, 4 phases × 2 replicas; later ones also the previous callbacks.
  CHECK(recorder.spans == std::vector<std::size_t>{10, 11, 11, 11});
  // The rate of the next optimizer step: warm-up to 0.1 over 2 steps, then linear decay to 0 at step 4.
  REQUIRE(recorder.rates.size() == 4);
  for (std::size_t i = 0; i < 4; ++i)
    CHECK(recorder.rates[i] == doctest::Approx(0.1 * double(optimizer.schedule(std::int64_t(i) + 1))));
}

TEST_CASE("buckets crossing a Communicator are timed: count, bytes, latency and overlap with backward") {
  using Config = policy::Config<Mirrored<2>>;
  using Sync = train::CommunicatorSync<comm::ThreadCommunicator, 2, 4096>;
  using Runner = train::StepRunner<Config, Model, Adam, SoftmaxCrossEntropy, Sync, profile::Probe<2>>;
  strategy::BasicStrategy<Config> strategy;
  Model model(42);
  comm::Rendezvous world(2);
  Runner runner(strategy, model, Adam{}, SoftmaxCrossEntropy{}, 100, 7, {},
                [&](int r) { return comm::ThreadCommunicator(world, r); }, comm::Overlap::comm_thread);
  profile::RunProfile run;
  run.world = 2;
  run.local_replicas = 2;
  runner.probe().start(profile::Clock::now(), 0);
  auto const& data = fashion();
  for (int i = 0; i < 4; ++i) {
    runner.probe().set_step(i);
    data::Batch const batch{data.features().columns(i * 100, 100), data.targets().columns(i * 100, 100), 100, i};
    runner.train_on_batch(batch);
    runner.probe().drain(run.spans);
  }
  run.steps = run.run_steps = 4;
  auto const buckets = runner.gradient_sync().bucket_plan().buckets();
  REQUIRE(buckets.size() > 1);  // 4 KiB buckets: the layers' tensors in several
  auto const count = census(run);
  CHECK(count.at({profile::Phase::all_reduce, 0}) == int(4 * buckets.size()));
  CHECK(count.at({profile::Phase::all_reduce, 1}) == int(4 * buckets.size()));
  std::int64_t bytes = 0;
  run.for_each(profile::Phase::all_reduce, [&](profile::Span const& s) {
    if (s.replica == 0 && s.step == 0) bytes += s.bytes;
    CHECK(s.bytes == std::int64_t(buckets[std::size_t(s.bucket)].size() * sizeof(float)));
  });
  std::int64_t const arena = std::int64_t(model.parameters().size() * sizeof(float));
  CHECK(bytes == arena);  // every gradient float once

  auto const report = profile::summarize(run);
  REQUIRE(report.collectives);
  auto const& c = *report.collectives;
  CHECK(c.count == std::int64_t(2 * 4 * buckets.size()));
  CHECK(c.buckets_per_step == std::int64_t(buckets.size()));
  CHECK(c.bytes_per_step == doctest::Approx(double(arena)));
  CHECK(c.latency_ms.p50 > 0.0);
  CHECK(c.latency_ms.p50 <= c.latency_ms.p90);
  CHECK(c.latency_ms.p90 <= c.latency_ms.p99);
  CHECK(c.bus_bandwidth > 0.0);
  CHECK(c.hidden >= 0.0);
  CHECK(c.hidden <= 1.0);
  CHECK(report.table().find("bucket") != std::string::npos);
}

TEST_CASE("TraceWriter writes Chrome trace events that a JSON parser reads: one track per replica and communicator") {
  TempDir const scratch;
  auto const& dir = scratch.path;
  auto const path = dir / "trace.json";
  Profiler profiler({.summary = false});
  fit_weights<Trainer<Mirrored<2>>>({.epochs = 1, .batch_size = 150}, TraceWriter{path}, profiler);
  std::ifstream in(path);
  auto const trace = nlohmann::json::parse(in);
  REQUIRE(trace.contains("traceEvents"));
  std::map<std::string, int> names;
  std::map<int, std::string> threads;
  for (auto const& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[e["tid"].get<int>()] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    ++names[e["name"].get<std::string>()];
    CHECK(e["dur"].get<double>() >= 0.0);
    CHECK(e["pid"] == 0);
  }
  CHECK(threads.at(0) == "training loop");
  CHECK(threads.at(1) == "replica 0");
  CHECK(threads.at(3) == "replica 1");
  CHECK(threads.at(4) == "replica 1 all-reduce");
  CHECK(names["forward"] == 8);  // 4 steps × 2 replicas
  CHECK(names["step"] == 4);
  CHECK(names["data wait"] == 4);
  std::size_t events = 0;
  for (auto const& [name, n] : names) events += std::size_t(n);
  CHECK(events == profiler.run().spans.size());

  // An unwritable path is an IoError naming it, and nothing is left behind.
  Model model(1);
  Trainer<OneDevice> trainer;
  CHECK_THROWS_AS(trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion().take(100), {.batch_size = 100},
                              TraceWriter{dir / "missing" / "trace.json"}),
                  IoError);
}
