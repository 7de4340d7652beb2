// The custom-loop API: shards, run, reduce, gather, all_reduce, failures that do not hang.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "strata.hpp"

using namespace strata;

TEST_CASE("shard_range splits any batch over any number of replicas without loss or overlap") {
  for (int n = 1; n <= 8; ++n)
    for (int batch = 0; batch <= 40; ++batch) {
      int next = 0;
      for (int r = 0; r < n; ++r) {
        auto const s = strategy::shard_range(batch, n, r);
        CHECK(s.first == next);
        CHECK(s.count >= batch / n);
        CHECK(s.count <= strategy::max_shard_size(batch, n));
        next += s.count;
      }
      CHECK(next == batch);
    }
}

TEST_CASE("run hands each replica its shard; reduce and gather combine the results") {
  Matrix x(1, 10), y = Matrix::Zero(1, 10);
  std::iota(x.data(), x.data() + 10, 0.0f);
  Dataset data(x, y);
  Strategy<Mirrored<3>> strategy;
  CHECK(strategy.num_replicas_in_sync() == 3);
  std::vector<float> seen;
  std::vector<int> sizes;
  for (auto const& batch : strategy.distribute(data.batch(7))) {
    auto sums = strategy.run([](ReplicaContext& ctx, Shard const& shard) {
      CHECK(shard.replica == ctx.replica_id_in_sync_group());
      return float(detail::eigen(shard.features).sum());
    }, batch);
    auto counts = strategy.run([](ReplicaContext&, Shard const& shard) { return shard.size; }, batch);
    auto parts = strategy.run([](ReplicaContext&, Shard const& shard) { return Matrix(detail::eigen(shard.features)); }, batch);
    Matrix const whole = strategy.gather(parts);
    for (int j = 0; j < whole.cols(); ++j) seen.push_back(whole(0, j));
    CHECK(strategy.reduce(ReduceOp::sum, sums) == doctest::Approx(detail::eigen(batch.global().features).sum()));
    for (int c : strategy.gather(counts)) sizes.push_back(c);
    CHECK(strategy.reduce(ReduceOp::max, counts) - strategy.reduce(ReduceOp::min, counts) <= 1);
  }
  std::vector<float> expected(10);
  std::iota(expected.begin(), expected.end(), 0.0f);
  CHECK(seen == expected);
  CHECK(sizes == std::vector<int>{3, 2, 2, 1, 1, 1});  // batches of 7 and 3 over 3 replicas
}

TEST_CASE("distribute rejects a global batch smaller than the replicas") {
  Strategy<Mirrored<4>> strategy;
  Dataset data(Matrix::Zero(1, 10), Matrix::Zero(1, 10));
  CHECK_THROWS_WITH_AS((void)strategy.distribute(data.batch(3)),
                       doctest::Contains("global batch size 3 is smaller than the 4 replicas in sync"), ConfigError);
}

TEST_CASE_TEMPLATE("all_reduce matches a serial reference for every op and awkward sizes, bit for bit twice", S,
                   Strategy<OneDevice>, Strategy<Mirrored<2>>, Strategy<Mirrored<3>>, Strategy<Mirrored<5>>,
                   Strategy<Mirrored<8>>) {
  S strategy;
  int const n = strategy.num_replicas_in_sync();
  for (std::size_t size : {0u, 1u, 2u, 7u, 13u, 17u, 1031u, 4099u, 10007u}) {
    for (auto op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min}) {
      // One table of inputs, so the reference and the replicas read identical bits.
      auto inputs = std::vector<std::vector<float>>(std::size_t(n), std::vector<float>(size));
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < size; ++i) inputs[std::size_t(r)][i] = std::sin(float(i) * 0.37f + float(r)) * float(r + 1);
      auto value = [&](int r, std::size_t i) { return inputs[std::size_t(r)][i]; };
      std::vector<float> expected(size);
      for (std::size_t i = 0; i < size; ++i) {
        float acc = value(0, i);
        for (int r = 1; r < n; ++r) {
          if (op == ReduceOp::max) acc = std::max(acc, value(r, i));
          else if (op == ReduceOp::min) acc = std::min(acc, value(r, i));
          else acc += value(r, i);
        }
        expected[i] = op == ReduceOp::mean ? acc * (1.0f / float(n)) : acc;
      }
      std::vector<std::vector<float>> first;
      for (int round = 0; round < 2; ++round) {
        auto results = strategy.run([&](ReplicaContext& ctx) {
          std::vector<float> mine(size);
          for (std::size_t i = 0; i < size; ++i) mine[i] = value(ctx.replica_id_in_sync_group(), i);
          ctx.all_reduce(mine, op);
          return mine;
        });
        for (int r = 0; r < n; ++r) {
          CHECK(results[r] == expected);  // summed in replica order, like the reference
          if (round == 0) first.push_back(results[r]);
          else CHECK(results[r] == first[std::size_t(r)]);
        }
      }
    }
  }
}

TEST_CASE("a custom loop compresses its gradients: ReplicaContext::all_reduce of bf16 sums in fp32 and rounds once") {
  Strategy<Mirrored<3>> strategy;
  std::size_t const size = 1000;
  auto gradient = [](int r, std::size_t i) { return std::sin(float(i) * 0.37f + float(r)) * (1.0f + float(i % 7)); };
  auto results = strategy.run([&](auto& ctx) {
    std::vector<float> mine(size);
    for (std::size_t i = 0; i < size; ++i) mine[i] = gradient(ctx.replica_id_in_sync_group(), i);
    std::vector<bf16> wire(size);
    store(wire.data(), mine.data(), size);
    ctx.all_reduce(std::span<bf16>(wire), ReduceOp::sum);
    load(mine.data(), wire.data(), size);
    return mine;
  });
  for (std::size_t i = 0; i < size; ++i) {
    float sum = float(bf16(gradient(0, i)));
    for (int r = 1; r < 3; ++r) sum += float(bf16(gradient(r, i)));
    for (int r = 0; r < 3; ++r) CHECK(results[r][i] == float(bf16(sum)));
  }
}

TEST_CASE("all_reduce with mismatched sizes ends in a CommError naming the sizes, not a hang") {
  Strategy<Mirrored<3>> strategy;
  auto mismatched = [&] {
    strategy.run([](ReplicaContext& ctx) {
      std::vector<float> mine(std::size_t(10 + ctx.replica_id_in_sync_group()));
      ctx.all_reduce(mine, ReduceOp::sum);
    });
  };
  CHECK_THROWS_WITH_AS(mismatched(), doctest::Contains("rank 0: all_reduce(sum) of 10 float; rank 1: all_reduce(sum) of 11 float; rank 2: all_reduce(sum) of 12 float"), CommError);
  // The group is usable afterwards.
  auto ids = strategy.run([](ReplicaContext& ctx) { return ctx.replica_id_in_sync_group(); });
  CHECK(strategy.reduce(ReduceOp::sum, ids) == 3);
}

TEST_CASE("an exception in one replica reaches the caller while the others wait at a barrier") {
  Strategy<Mirrored<4>> strategy;
  auto failing = [&] {
    strategy.run([](ReplicaContext& ctx) {
      if (ctx.replica_id_in_sync_group() == 2) throw std::runtime_error("replica 2 failed");
      ctx.barrier();
      ctx.barrier();
    });
  };
  for (int round = 0; round < 3; ++round) CHECK_THROWS_WITH(failing(), "replica 2 failed");
  std::atomic<int> passed{0};
  strategy.run([&](ReplicaContext& ctx) {
    ctx.barrier();
    ++passed;
  });
  CHECK(passed == 4);
}

TEST_CASE("barriers order memory: what one replica wrote before a barrier, all read after it") {
  Strategy<Mirrored<4>> strategy;
  std::vector<int> slots(4);
  for (int round = 0; round < 200; ++round) {
    auto sums = strategy.run([&](ReplicaContext& ctx) {
      slots[std::size_t(ctx.replica_id_in_sync_group())] = round + ctx.replica_id_in_sync_group();
      ctx.barrier();
      int sum = std::accumulate(slots.begin(), slots.end(), 0);
      ctx.barrier();
      return sum;
    });
    for (int r = 0; r < 4; ++r) REQUIRE(sums[r] == 4 * round + 6);
  }
}

TEST_CASE("BucketPlan: buckets run from the last layer back, contiguous, at most the bucket size") {
  std::size_t const offsets[] = {0, 100, 100, 164, 164, 500};  // five layers; 1 and 3 have no parameters
  auto ranges = [](comm::BucketPlan const& plan) {
    std::vector<std::array<std::size_t, 4>> out;
    for (auto const& b : plan.buckets()) out.push_back({b.begin, b.end, b.first_layer, b.last_layer});
    return out;
  };
  using R = std::vector<std::array<std::size_t, 4>>;
  CHECK(ranges(comm::BucketPlan(offsets, 4)) == R{{164, 500, 4, 4}, {100, 164, 2, 3}, {0, 100, 0, 1}});
  CHECK(ranges(comm::BucketPlan(offsets, 400)) == R{{164, 500, 4, 4}, {100, 164, 1, 3}, {0, 100, 0, 0}});
  CHECK(ranges(comm::BucketPlan(offsets, 25u << 20)) == R{{0, 500, 0, 4}});
  comm::BucketPlan const plan(offsets, 400);
  CHECK(plan.bucket_of_layer(0) == 2);
  CHECK(plan.bucket_of_layer(2) == 1);
  CHECK_THROWS_AS(comm::BucketPlan(std::span<std::size_t const>(offsets, 1), 4), ConfigError);
}

namespace {
using BucketModel = Sequential<Dense<20, 64>, Relu, Dense<64, 64>, Relu, Dense<64, 10>>;

// One replica's gradients on its own random batch (a fixed function of replica and step).
template <class LayerDone>
void replica_gradients(BucketModel const& model, BucketModel::Workspace<CpuBackend>& ws, float* grads, int replica,
                       int step, LayerDone done) {
  Matrix x(20, 16), y(1, 16);
  Rng rng(mix64(std::uint64_t(replica), std::uint64_t(step)));
  for (int i = 0; i < x.size(); ++i) x.data()[i] = float(rng.uniform()) - 0.5f;
  for (int i = 0; i < 16; ++i) y(0, i) = float(rng() % 10);
  model.forward<CpuBackend>(ws, model.parameters().data(), view(x), {});
  SoftmaxCrossEntropy{}.forward_backward<CpuBackend>(ws.output(), view(y), ws.output_gradient(), 1.0f / 48);
  model.backward<CpuBackend>(ws, model.parameters().data(), grads, view(x), false, done);
}
}  // namespace

TEST_CASE("BucketedAllReduce: every overlap mode gives the bits of one all-reduce after backward") {
  constexpr int replicas = 3;
  BucketModel const model(5);
  comm::ThreadGroup group(replicas);
  // Reference: each replica's raw gradients, summed in replica order.
  std::vector<AlignedBuffer> raw;
  for (int r = 0; r < replicas; ++r) raw.emplace_back(BucketModel::arena_size);
  for (auto overlap : {comm::Overlap::after_backward, comm::Overlap::in_backward, comm::Overlap::comm_thread}) {
    CAPTURE(int(overlap));
    for (std::size_t bytes : {std::size_t(1), std::size_t(16384), std::size_t(25) << 20}) {
      CAPTURE(bytes);
      std::vector<AlignedBuffer> grads;
      for (int r = 0; r < replicas; ++r) grads.emplace_back(BucketModel::arena_size);
      std::vector<std::unique_ptr<comm::BucketedAllReduce<comm::ThreadCommunicator>>> syncs;
      std::vector<comm::ThreadCommunicator> comms;
      for (int r = 0; r < replicas; ++r) comms.push_back(group.communicator(r));
      for (int r = 0; r < replicas; ++r)
        syncs.push_back(std::make_unique<comm::BucketedAllReduce<comm::ThreadCommunicator>>(
            comms[std::size_t(r)], comm::BucketPlan(BucketModel::offsets, bytes), grads[std::size_t(r)].span(),
            ReduceOp::sum, overlap));
      for (int step = 0; step < 3; ++step) {
        auto task = [&](int r) {
          BucketModel::Workspace<CpuBackend> ws(16);
          replica_gradients(model, ws, raw[std::size_t(r)].data(), r, step, [](std::size_t) {});
          replica_gradients(model, ws, grads[std::size_t(r)].data(), r, step,
                            [&](std::size_t layer) { syncs[std::size_t(r)]->layer_done(layer); });
          syncs[std::size_t(r)]->finish();
        };
        group.run(task);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < BucketModel::arena_size; ++i) {
          float const expected = (raw[0].data()[i] + raw[1].data()[i]) + raw[2].data()[i];
          for (int r = 0; r < replicas; ++r) wrong += grads[std::size_t(r)].data()[i] != expected;
        }
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("BucketedAllReduce: a peer that never reduces ends finish() in a CommError, not a hang") {
  comm::ThreadGroup group(2, std::chrono::milliseconds(200));
  BucketModel const model(5);
  AlignedBuffer grads(BucketModel::arena_size);
  auto comm0 = group.communicator(0);
  comm::BucketedAllReduce<comm::ThreadCommunicator> sync(comm0, comm::BucketPlan(BucketModel::offsets, 4096),
                                                           grads.span(), ReduceOp::sum, comm::Overlap::comm_thread);
  auto task = [&](int r) {
    if (r == 1) return;  // never joins
    BucketModel::Workspace<CpuBackend> ws(16);
    replica_gradients(model, ws, grads.data(), 0, 0, [&](std::size_t layer) { sync.layer_done(layer); });
    sync.finish();
  };
  CHECK_THROWS_WITH_AS(group.run(task), doctest::Contains("never arrived: 1"), CommError);
}

namespace {
// Waits up to `limit` for `flag`; false if it never came.
bool wait_for_flag(std::atomic<bool> const& flag, std::chrono::seconds limit) {
  auto const deadline = std::chrono::steady_clock::now() + limit;
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}
}  // namespace

TEST_CASE("ThreadSync: the update waits only for the layers it reads, once every replica has finished them") {
  std::size_t const offsets[] = {0, 100, 100, 164, 500};  // four layers; layer 1 has no parameters
  comm::ThreadGroup group(2, std::chrono::seconds(20));
  AlignedBuffer grads(500);
  train::ThreadSync<2> sync(group, grads.span(), offsets);
  for (int round = 0; round < 3; ++round) {
    sync.begin_reduction(true);
    std::atomic<bool> read_late_layers{false}, read_first_layer{false};
    bool saw_early_read = false, first_layer_waited = false;
    std::array<std::size_t, 2> claims{};
    auto task = [&](int r) {
      if (r == 1) {  // the slow replica: backward has passed layers 3, 2 and 1, not 0
        for (std::size_t layer : {3, 2, 1}) sync.layer_done(1, layer);
        saw_early_read = wait_for_flag(read_late_layers, std::chrono::seconds(10));
        first_layer_waited = !read_first_layer.load();  // replica 0 cannot have read layer 0 yet
        sync.layer_done(1, 0);
        sync.gradients_ready(1);
        claims[1] = sync.claim(3);
        return;
      }
      sync.gradients_ready(0);       // replica 0's backward is over
      sync.wait_final(0, 100, 500);  // layers 1 to 3: final on both replicas
      read_late_layers = true;
      sync.wait_final(0, 0, 500);    // layer 0 as well: only after replica 1 finished it
      read_first_layer = true;
      claims[0] = sync.claim(3);
    };
    group.run(task);
    CHECK(saw_early_read);
    CHECK(first_layer_waited);
    CHECK(std::min(claims[0], claims[1]) == 0);  // shared work counts from 0 every step
    CHECK(std::max(claims[0], claims[1]) == 3);
  }
  // Layer offsets that do not cover the arena are refused.
  std::size_t const short_offsets[] = {0, 100, 400};
  CHECK_THROWS_WITH_AS(train::ThreadSync<2>(group, grads.span(), short_offsets),
                       doctest::Contains("the layer offsets must rise from 0 to the arena's 500 floats"), ConfigError);
}

TEST_CASE("ThreadSync: a replica that never finishes backward ends the wait in a CommError naming it; a failure ends it at once") {
  std::size_t const offsets[] = {0, 100, 500};
  comm::ThreadGroup group(2, std::chrono::milliseconds(200));
  AlignedBuffer grads(500);
  train::ThreadSync<2> sync(group, grads.span(), offsets);
  sync.begin_reduction(true);
  auto stalled = [&](int r) {
    if (r == 1) {
      sync.layer_done(1, 1);
      return;  // never passes layer 0
    }
    sync.gradients_ready(0);
    sync.wait_final(0, 100, 500);
    sync.wait_final(0, 0, 500);
  };
  CHECK_THROWS_WITH_AS(group.run(stalled),
                       "ThreadSync: replica 0 waited 200 ms for the gradients of layer 0 from replica(s) 1, which did "
                       "not finish backward; raise the strategy's timeout if a step may take that long",
                       CommError);

  // A replica that fails wakes the one waiting for its layers long before the timeout.
  comm::ThreadGroup patient(2, std::chrono::seconds(60));
  train::ThreadSync<2> waiting(patient, grads.span(), offsets);
  waiting.begin_reduction(true);
  auto failing = [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      throw std::runtime_error("replica 1 failed in backward");
    }
    waiting.gradients_ready(0);
    waiting.wait_final(0, 0, 500);
  };
  auto const begin = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(patient.run(failing), "replica 1 failed in backward");
  CHECK(std::chrono::steady_clock::now() - begin < std::chrono::seconds(10));
  // The next step of the same group and sync runs.
  waiting.begin_reduction(true);
  auto whole = [&](int r) {
    waiting.gradients_ready(r);
    waiting.wait_final(r, 0, 500);
  };
  CHECK_NOTHROW(patient.run(whole));
}
