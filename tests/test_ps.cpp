// ParameterServer: the partitioner, the wire messages, one server's staleness bound and
// at-most-once rule, the coordinator, and whole jobs of server and worker threads (ZeroMQ
// inproc://) against OneDevice on the same batches and on Fashion-MNIST.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>

#include "strata.hpp"
#include "strata/ps.hpp"
#include "temp_dir.hpp"

using namespace strata;

namespace {
using Model = Sequential<Dense<784, 32>, Relu, Dense<32, 10>>;

Dataset const& fashion() {
  static Dataset const data = data::fashion_mnist(data::Split::train).take(610);
  return data;
}

std::vector<nn::ParameterTensor> tensors(std::vector<std::vector<std::int64_t>> const& shapes) {
  std::vector<nn::ParameterTensor> out;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    out.push_back({strata::detail::message("t", i), shapes[i], offset});
    offset += nn::element_count(shapes[i]);
  }
  return out;
}

zmq::message_t request(std::uint64_t job, ps::Kind kind, std::int64_t step, std::int64_t version,
                       std::span<float const> floats = {}, int server = 0) {
  ps::Header h;
  h.kind = kind;
  h.job = job;
  h.sender = 0;
  h.server = server;
  h.step = step;
  h.version = version;
  return ps::encode(h, floats);
}

ps::Header header_of(zmq::message_t const& m) {
  ps::Header h;
  REQUIRE(m.size() >= sizeof h);
  std::memcpy(&h, m.data(), sizeof h);
  return h;
}
std::string error_of(zmq::message_t const& m, std::uint64_t job) { return ps::Message(m, job).text(); }
}  // namespace

TEST_CASE("the partitioner cuts tensors along their first axis into shards of at least the minimum size, balanced") {
  // 1000x100 floats = 400,000 bytes: with 100,000-byte shards and 3 servers, 3 shards (rows 334, 333, 333);
  // a 10-float bias stays whole.
  auto const t = tensors({{1000, 100}, {10}, {50, 100}});
  ps::Partition const p(t, 3, {.min_shard_bytes = 100'000});
  std::size_t covered = 0;
  std::vector<std::size_t> rows_of_first;
  for (auto const& s : p.shards()) {
    CHECK(s.begin == covered);  // arena order, no gap or overlap
    covered = s.end;
    if (s.tensor == 0) rows_of_first.push_back(s.size() / 100);
    CHECK(s.size() % (s.tensor == 1 ? 1 : 100) == 0);  // whole rows
  }
  CHECK(covered == 1000 * 100 + 10 + 50 * 100);
  CHECK(rows_of_first == std::vector<std::size_t>{334, 333, 333});
  CHECK(p.of(0).size() + p.of(1).size() + p.of(2).size() == p.shards().size());
  // 20,000 bytes of the third tensor make one shard; it and the bias go to the lightest servers.
  std::size_t const heaviest = std::max({p.floats(0), p.floats(1), p.floats(2)});
  std::size_t const lightest = std::min({p.floats(0), p.floats(1), p.floats(2)});
  CHECK(heaviest - lightest <= 100 * 100 + 10);
  // The same layout twice is the same fingerprint; another number of servers is not.
  CHECK(ps::Partition(t, 3, {.min_shard_bytes = 100'000}).fingerprint() == p.fingerprint());
  CHECK(ps::Partition(t, 2, {.min_shard_bytes = 100'000}).fingerprint() != p.fingerprint());
  // The default minimum (256 KiB) keeps this small model's tensors whole.
  CHECK(ps::Partition(Model::parameter_tensors(), 2).shards().size() == Model::parameter_tensors().size());
  CHECK_THROWS_AS(ps::Partition(t, 0), ConfigError);
}

TEST_CASE("a server applies a push at most once and rejects one more than S updates old") {
  auto const t = tensors({{4}});
  ps::Partition const p(t, 1);
  std::vector<float> const initial{1, 2, 3, 4};
  ps::ShardServer<Sgd> server(p, 0, t, initial, Sgd{.lr = 0.5f}, /*staleness=*/1);
  std::uint64_t const job = p.fingerprint();
  std::vector<float> const g{1, 1, 1, 1};

  auto pulled = server.handle(request(job, ps::Kind::pull, -1, 0));
  CHECK(header_of(pulled).kind == ps::Kind::weights);
  CHECK(header_of(pulled).version == 0);
  CHECK(header_of(server.handle(request(job, ps::Kind::push, 0, 0, g))).kind == ps::Kind::applied);  // v1
  CHECK(header_of(server.handle(request(job, ps::Kind::push, 1, 0, g))).kind == ps::Kind::applied);  // 1 old: v2
  std::vector<float> const before(server.weights().begin(), server.weights().end());
  CHECK(before == std::vector<float>{0, 1, 2, 3});
  // Step 2 computed on version 0 is 2 updates old: stale, and the weights do not move.
  auto const stale = server.handle(request(job, ps::Kind::push, 2, 0, g));
  CHECK(header_of(stale).kind == ps::Kind::stale);
  CHECK(header_of(stale).version == 2);
  CHECK(std::vector<float>(server.weights().begin(), server.weights().end()) == before);
  // Step 1 again (a retried push): answered applied, not applied twice.
  CHECK(header_of(server.handle(request(job, ps::Kind::push, 1, 1, g))).kind == ps::Kind::applied);
  CHECK(server.version() == 2);
  CHECK(std::vector<float>(server.weights().begin(), server.weights().end()) == before);
  CHECK(server.stale_pushes() == 1);
}

TEST_CASE("a server answers malformed or foreign messages with an error that says why, and keeps serving") {
  auto const t = tensors({{4}});
  ps::Partition const p(t, 1);
  std::vector<float> const initial{1, 2, 3, 4};
  ps::ShardServer<Adam> server(p, 0, t, initial, Adam{}, 0);
  std::uint64_t const job = p.fingerprint();
  auto error = [&](zmq::message_t const& m) {
    auto reply = server.handle(m);
    REQUIRE(header_of(reply).kind == ps::Kind::error);
    return error_of(reply, job);
  };
  CHECK(error(zmq::message_t(std::string("hello"))).find("shorter than the 48-byte header") != std::string::npos);
  auto bad_magic = request(job, ps::Kind::pull, -1, 0);
  std::memset(bad_magic.data(), 'x', 4);
  CHECK(error(bad_magic).find("not a strata ParameterServer message") != std::string::npos);
  CHECK(error(request(job + 1, ps::Kind::pull, -1, 0)).find("belongs to job") != std::string::npos);
  auto truncated = request(job, ps::Kind::push, 0, 0, std::vector<float>{1, 1, 1, 1});
  zmq::message_t cut(truncated.data(), truncated.size() - 3);
  CHECK(error(cut).find("announces 4 floats") != std::string::npos);
  CHECK(error(request(job, ps::Kind::push, 0, 0, std::vector<float>{1, 1})).find("must hold its 4 floats, not 2") !=
        std::string::npos);
  CHECK(error(request(job, ps::Kind::push, 0, 5, std::vector<float>(4, 1.0f))).find("computed on version 5") !=
        std::string::npos);
  CHECK(error(request(job, ps::Kind::pull, -1, 0, {}, 3)).find("not server 3") != std::string::npos);
  auto unknown = request(job, ps::Kind::pull, -1, 0);
  std::uint16_t const kind = 99;
  std::memcpy(static_cast<char*>(unknown.data()) + 6, &kind, 2);
  CHECK(error(unknown).find("unknown kind 99") != std::string::npos);
  CHECK(server.rejected_messages() == 8);
  CHECK(header_of(server.handle(request(job, ps::Kind::pull, -1, 0))).kind == ps::Kind::weights);
  CHECK(std::vector<float>(server.weights().begin(), server.weights().end()) == initial);
}

TEST_CASE("the coordinator runs every step once, in order under S = 0, and reports a failed step") {
  struct Counter {
    std::atomic<int> running{0}, most{0};
  };
  std::vector<Counter> workers(3);
  std::vector<Counter*> pointers{&workers[0], &workers[1], &workers[2]};
  std::atomic<int> running{0}, most{0};
  std::vector<std::int64_t> order;
  std::mutex m;
  {
    ps::Coordinator<Counter> coordinator(pointers, {.staleness = 0});
    std::vector<ps::RemoteValue<std::int64_t>> values;
    for (int i = 0; i < 20; ++i)
      values.push_back(coordinator.schedule([&](Counter&, std::int64_t step) {
        int const now = ++running;
        most = std::max(most.load(), now);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        {
          std::lock_guard lock(m);
          order.push_back(step);
        }
        --running;
        return step * step;
      }));
    coordinator.join();
    for (int i = 0; i < 20; ++i) CHECK(values[std::size_t(i)].fetch() == i * i);
    CHECK(most == 1);  // synchronous: one step at a time
    std::vector<std::int64_t> expected(20);
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(order == expected);

    // A step that throws: join() rethrows it, its value throws it, and the queue is cancelled.
    auto bad = coordinator.schedule([](Counter&, std::int64_t) -> int { throw DataError("step 20 found a bad batch"); });
    CHECK_THROWS_WITH_AS(coordinator.join(), "step 20 found a bad batch", DataError);
    CHECK_THROWS_AS(bad.fetch(), DataError);
    coordinator.join();  // reported once
  }
  // S = 2 lets steps overlap, never more than the workers.
  running = 0;
  most = 0;
  ps::Coordinator<Counter> relaxed(pointers, {.staleness = 2});
  for (int i = 0; i < 30; ++i)
    relaxed.schedule([&](Counter&, std::int64_t) {
      int const now = ++running;
      most = std::max(most.load(), now);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      --running;
    });
  relaxed.join();
  CHECK(most <= 3);
  CHECK(relaxed.steps_scheduled() == 30);
}

// S = 0: every step is computed on the weights of all steps before it, in order, so the job
// trains what one replica trains on the same batches, whichever worker ran which step.
TEST_CASE_TEMPLATE("Trainer<ParameterServer> with S = 0 trains what OneDevice trains on the same batches", T,
                   Trainer<ParameterServer<1, 1>>, Trainer<ParameterServer<2, 2>>, Trainer<ParameterServer<3, 2>>) {
  Adam const adam{.lr = 1e-3f};
  FitOptions const options{.epochs = 2, .batch_size = 30, .seed = 5, .clip_global_norm = 0.5f};
  Model reference(42);
  auto const expected = Trainer<OneDevice>{}.fit(reference, adam, SoftmaxCrossEntropy{}, fashion(), options);

  Model trained(42);
  // Shards of at least 4 KiB: the first layer's 25,088 floats are cut over both servers.
  T trainer({.staleness = 0, .partition = {.min_shard_bytes = 4096}});
  auto const history = trainer.fit(trained, adam, SoftmaxCrossEntropy{}, fashion(), options);
  auto const a = reference.parameters(), b = trained.parameters();
  CHECK(std::vector<float>(b.begin(), b.end()) == std::vector<float>(a.begin(), a.end()));
  CHECK(history["loss"] == expected["loss"]);  // the same steps, the same tallies
  CHECK(history["accuracy"] == expected["accuracy"]);
}

// The callbacks see every batch in order and every epoch; BackupAndRestore saves at the
// epochs' ends, and a run stopped after one epoch and started again (S = 0) ends with the
// weights of a run that was never stopped.
TEST_CASE("Trainer<ParameterServer> calls the callbacks and resumes from BackupAndRestore bit for bit") {
  struct Counting {
    std::vector<std::int64_t> steps;
    int epochs = 0;
    bool boundary_at_batch = true;
    void on_batch_end(BatchLogs const& logs, io::TrainingState const& state) {
      steps.push_back(logs.step);
      boundary_at_batch = boundary_at_batch && state.at_step_boundary;
    }
    void on_epoch_end(EpochLogs const&) { ++epochs; }
  };
  struct InterruptAfterFirstEpoch {  // after BackupAndRestore saved it: as if the job were lost
    void on_epoch_end(EpochLogs const&) { throw Error("interrupted"); }
  };
  Sgd const sgd{.lr = 0.05f, .momentum = 0.9f};
  FitOptions const options{.epochs = 2, .batch_size = 30, .seed = 9};
  Model uninterrupted(3);
  Trainer<ParameterServer<2, 2>>({.partition = {.min_shard_bytes = 4096}})
      .fit(uninterrupted, sgd, SoftmaxCrossEntropy{}, fashion(), options);

  TempDir const dir;
  Model model(3);
  Trainer<ParameterServer<2, 2>> trainer({.partition = {.min_shard_bytes = 4096}});
  Counting counting;
  CHECK_THROWS_WITH(trainer.fit(model, sgd, SoftmaxCrossEntropy{}, fashion(), options,
                                BackupAndRestore{.directory = dir.path}, counting, InterruptAfterFirstEpoch{}),
                    "interrupted");
  std::vector<std::int64_t> expected(21);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(counting.steps == expected);  // batch order, once each
  CHECK(counting.epochs == 1);
  CHECK_FALSE(counting.boundary_at_batch);  // steps in flight: no step-frequency saves mid-epoch

  Model restarted(100);  // other weights: the backup's must replace them
  BackupAndRestore backup{.directory = dir.path};
  auto const history = trainer.fit(restarted, sgd, SoftmaxCrossEntropy{}, fashion(), options, backup);
  REQUIRE(backup.restored);
  CHECK(history["loss"].size() == 2);
  auto const a = uninterrupted.parameters(), b = restarted.parameters();
  CHECK(std::vector<float>(b.begin(), b.end()) == std::vector<float>(a.begin(), a.end()));
}

TEST_CASE("a worker whose server does not answer throws a CommError naming it, within the timeout") {
  zmq::context_t context(1);
  ps::Partition const p(Model::parameter_tensors(), 1);
  ps::Worker<Model, SoftmaxCrossEntropy> worker(context, {"inproc://strata-ps-test-nobody"}, p, Model(1), {}, 8, 0,
                                                {.timeout = std::chrono::milliseconds(100)});
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(worker.pull(), doctest::Contains("server 0 at inproc://strata-ps-test-nobody did not answer"),
                       CommError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("Trainer<ParameterServer>::fit checks its options and data before any step") {
  Model model(1);
  Trainer<ParameterServer<1, 1>> trainer;
  CHECK_THROWS_AS(trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, Dataset{}, {.batch_size = 8}), DataError);
  CHECK_THROWS_AS(trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion(), {.epochs = 0, .batch_size = 8}), ConfigError);
  CHECK_THROWS_AS(trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion(), {.batch_size = 0}), ConfigError);
  using Single = Trainer<ParameterServer<1, 1>>;
  CHECK_THROWS_WITH_AS(Single({.staleness = -1}), doctest::Contains("staleness -1 must be >= 0"), ConfigError);
}

// Asynchronous training on the real data: 2 workers, 2 servers, gradients up to 2 updates
// old. The bar is the issue's: at least 0.85 on the 10,000 test images.
TEST_CASE("asynchronous ParameterServer<2, 2> training reaches 0.85 test accuracy on Fashion-MNIST") {
  using Mlp = Sequential<Dense<784, 128>, Relu, Dense<128, 10>>;
  auto const train = data::fashion_mnist(data::Split::train);
  auto const test = data::fashion_mnist(data::Split::test);
  Mlp model(7);
  Trainer<ParameterServer<2, 2>> trainer({.staleness = 2, .partition = {.min_shard_bytes = 64 << 10}});
  auto const history = trainer.fit(model, Adam{.lr = 1e-3f}, SoftmaxCrossEntropy{}, train,
                                   {.epochs = 3, .batch_size = 64, .validation = test, .seed = 3});
  MESSAGE("val_accuracy per epoch: ", history["val_accuracy"][0], " ", history["val_accuracy"][1], " ",
          history["val_accuracy"][2]);
  CHECK(history["val_accuracy"].back() >= 0.85);
  CHECK(trainer.evaluate(model, SoftmaxCrossEntropy{}, test).accuracy == history["val_accuracy"].back());
}

TEST_CASE("a port in use or a malformed address is a CommError naming it, not ZeroMQ's exception") {
  zmq::context_t context(1);
  zmq::socket_t first(context, zmq::socket_type::router), second(context, zmq::socket_type::router);
  first.set(zmq::sockopt::linger, 0);
  second.set(zmq::sockopt::linger, 0);
  ps::listen_on(first, "tcp://127.0.0.1:*", "server");  // a free port, whichever
  std::string const taken = first.get(zmq::sockopt::last_endpoint);
  CHECK_THROWS_WITH_AS(ps::listen_on(second, taken, "chief"),
                       doctest::Contains(("the chief cannot listen on " + taken).c_str()), CommError);
  CHECK_THROWS_WITH_AS(ps::connect_to(second, "tcp://no-port-here", "worker"),
                       doctest::Contains("the worker cannot connect to tcp://no-port-here"), CommError);
}
