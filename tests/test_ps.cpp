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
TEST_CASE_TEMPLATE("ParameterServer with S = 0 trains what OneDevice trains on the same batches", P,
                   ParameterServer<1, 1>, ParameterServer<2, 2>, ParameterServer<3, 2>) {
  Adam const adam{.lr = 1e-3f};
  Model reference(42);
  Trainer<OneDevice>{}.fit(reference, adam, SoftmaxCrossEntropy{}, fashion(), {.epochs = 2, .batch_size = 30, .seed = 5});

  Model const initial(42);
  // Shards of at least 4 KiB: the first layer's 25,088 floats are cut over both servers.
  ps::LocalCluster<P, Model, Adam, SoftmaxCrossEntropy> cluster(
      initial, adam, {}, {.staleness = 0, .max_batch = 30, .partition = {.min_shard_bytes = 4096}});
  auto const history = cluster.fit(fashion(), {.epochs = 2, .batch_size = 30, .seed = 5});
  Model trained(0);
  cluster.copy_weights_to(trained);
  auto const a = reference.parameters(), b = trained.parameters();
  CHECK(std::vector<float>(b.begin(), b.end()) == std::vector<float>(a.begin(), a.end()));
  CHECK(history["loss"].size() == 2);
  CHECK(history["loss"][1] < history["loss"][0]);
  for (int s = 0; s < P::servers; ++s) {
    CHECK(cluster.server(s).version() == 2 * 21);  // 610 samples at 30: 21 steps an epoch, each applied once
    CHECK(cluster.server(s).stale_pushes() == 0);
  }
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

TEST_CASE("fit checks its options and data before any step") {
  ps::LocalCluster<ParameterServer<1, 1>, Model, Sgd, SoftmaxCrossEntropy> cluster(Model(1), Sgd{}, {}, {.max_batch = 32});
  CHECK_THROWS_WITH_AS(cluster.fit(fashion(), {.batch_size = 64}), doctest::Contains("batch_size 64 must be in 1..32"),
                       ConfigError);
  CHECK_THROWS_AS(cluster.fit(Dataset{}, {.batch_size = 8}), DataError);
  CHECK_THROWS_AS(cluster.fit(fashion(), {.epochs = 0, .batch_size = 8}), ConfigError);
}

// Asynchronous training on the real data: 2 workers, 2 servers, gradients up to 2 updates
// old. The bar is the issue's: at least 0.85 on the 10,000 test images.
TEST_CASE("asynchronous ParameterServer<2, 2> training reaches 0.85 test accuracy on Fashion-MNIST") {
  using Mlp = Sequential<Dense<784, 128>, Relu, Dense<128, 10>>;
  auto const train = data::fashion_mnist(data::Split::train);
  auto const test = data::fashion_mnist(data::Split::test);
  ps::LocalCluster<ParameterServer<2, 2>, Mlp, Adam, SoftmaxCrossEntropy> cluster(
      Mlp(7), Adam{.lr = 1e-3f}, {}, {.staleness = 2, .max_batch = 64, .partition = {.min_shard_bytes = 64 << 10}});
  auto const history = cluster.fit(train, {.epochs = 3, .batch_size = 64, .validation = test, .seed = 3});
  MESSAGE("val_accuracy per epoch: ", history["val_accuracy"][0], " ", history["val_accuracy"][1], " ",
          history["val_accuracy"][2]);
  CHECK(history["val_accuracy"].back() >= 0.85);
  std::int64_t const steps = 3 * ((60000 + 63) / 64);
  CHECK(cluster.server(0).version() == steps);  // every step applied exactly once on each server
  CHECK(cluster.server(1).version() == steps);
}

TEST_CASE("TF_CONFIG: the cluster and this task's role, and every malformed description named") {
  auto const spec = ps::ClusterSpec::parse(
      R"({"cluster": {"chief": ["host0:2220"], "worker": ["host1:2221", "host2:2222"], "ps": ["host3:2223"]},
          "task": {"type": "worker", "index": 1}})");
  CHECK(spec.role == ps::Role::worker);
  CHECK(spec.index == 1);
  CHECK(spec.chief == "host0:2220");
  CHECK(spec.workers.size() == 2);
  CHECK(spec.server_addresses() == std::vector<std::string>{"tcp://host3:2223"});
  CHECK(ps::ClusterSpec::bind_address(spec.own_address()) == "tcp://*:2222");

  auto fails = [](std::string const& text, std::string const& expected) {
    CHECK_THROWS_WITH_AS(ps::ClusterSpec::parse(text), doctest::Contains(expected.c_str()), ConfigError);
  };
  std::string const cluster = R"("cluster": {"chief": ["a:1"], "worker": ["b:2"], "ps": ["c:3"]})";
  fails(R"({"task": {"type": "ps"}})", "has no \"cluster\" object");
  fails("{" + cluster + "}", "has no \"task\" object");
  fails(R"({"cluster": {"worker": ["b:2"], "ps": ["c:3"]}, "task": {"type": "ps"}})", "has no \"chief\" list");
  fails(R"({"cluster": {"chief": ["a:1"], "worker": ["b"], "ps": ["c:3"]}, "task": {"type": "ps"}})",
        "holds \"b\", which is not \"host:port\"");
  fails(R"({"cluster": {"chief": ["a:1"], "worker": ["b:99999"], "ps": ["c:3"]}, "task": {"type": "ps"}})",
        "port is not a number in 0..65535");
  fails(R"({"cluster": {"chief": ["a:1"], "worker": [], "ps": ["c:3"]}, "task": {"type": "ps"}})",
        "\"worker\" is empty");
  fails("{" + cluster + R"(, "task": {"type": "evaluator"}})", "is \"evaluator\"; it must be");
  fails("{" + cluster + R"(, "task": {"type": "ps", "index": 1}})", "is ps 1 but \"cluster\" has 1 ps task(s)");
  fails("{" + cluster + R"(, "task": {"type": "ps", "index": -1}})", "must be a non-negative integer");
}

TEST_CASE("a server's snapshot holds its weights and optimizer state; restored, it continues where it was") {
  auto const t = tensors({{2, 3}, {2}});
  ps::Partition const p(t, 2, {.min_shard_bytes = 4});  // the first tensor's rows on both servers
  std::vector<float> initial{1, 2, 3, 4, 5, 6, 7, 8};
  std::uint64_t const job = p.fingerprint();
  Adam const adam{.lr = 0.1f};
  std::vector<float> const g(p.floats(0), 0.5f);
  ps::ShardServer<Adam> server(p, 0, t, initial, adam, 0);
  for (std::int64_t step = 0; step < 3; ++step)
    REQUIRE(header_of(server.handle(request(job, ps::Kind::push, step, step, g))).kind == ps::Kind::applied);
  auto const snapshot = server.handle(request(job, ps::Kind::snapshot, -1, 0));
  ps::Message const m(snapshot, job);
  REQUIRE(m.floats() == 3 * p.floats(0));  // weights, Adam's m and v

  // The whole-model arrays a checkpoint holds, filled from the snapshot.
  std::vector<float> weights = initial;
  auto state = adam.make_state(initial.size());
  std::size_t at = 0;
  auto take = [&](std::span<float> arena) {
    for (auto const& shard : p.of(0)) {
      m.copy_floats(at, arena.subspan(shard.begin, shard.size()));
      at += shard.size();
    }
  };
  take(weights);
  state.for_each_slot([&](char const*, AlignedBuffer& slot) { take(slot.span()); });

  ps::ShardServer<Adam> restored(p, 0, t, initial, adam, 0);
  restored.restore(weights, state, 3);
  CHECK(restored.version() == 3);
  CHECK(std::vector<float>(restored.weights().begin(), restored.weights().end()) ==
        std::vector<float>(server.weights().begin(), server.weights().end()));
  // Step 2 was applied before the checkpoint: not again. Step 3 moves both alike.
  CHECK(header_of(restored.handle(request(job, ps::Kind::push, 2, 3, g))).kind == ps::Kind::applied);
  CHECK(restored.version() == 3);
  server.handle(request(job, ps::Kind::push, 3, 3, g));
  restored.handle(request(job, ps::Kind::push, 3, 3, g));
  CHECK(std::vector<float>(restored.weights().begin(), restored.weights().end()) ==
        std::vector<float>(server.weights().begin(), server.weights().end()));
}
