// The custom-loop API: shards, run, reduce, gather, all_reduce, failures that do not hang.
#include <doctest/doctest.h>

#include <atomic>
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
