// The communication layer: every collective of ThreadCommunicator (and Hierarchical over
// threads) against a serial reference that sums in rank order, for awkward sizes and 1..8
// ranks, in float, bf16 and fp16; and the errors that replace hangs.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include "comm_reference.hpp"
#include "strata/comm/hierarchical.hpp"
#include "strata/comm/shm_communicator.hpp"
#include "strata/comm/thread_communicator.hpp"
#include "strata/comm/thread_group.hpp"

using namespace strata;
using namespace strata::comm;
using strata::test::Fill;
using strata::test::check_collectives;

namespace {
constexpr std::size_t sizes[] = {0, 1, 2, 3, 7, 13, 31, 1000, 1021, 4099};
constexpr ReduceOp ops[] = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min};

template <class T>
void all_collectives_on_threads(int n) {
  ThreadGroup group(n);
  auto task = [&](int rank) {
    auto comm = group.communicator(rank);
    check_collectives<T>(comm, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops));
  };
  group.run(task);
}
}  // namespace

TEST_CASE_TEMPLATE("ThreadCommunicator: every collective equals the serial reference, for 1..8 ranks", T, float, bf16,
                   fp16) {
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    all_collectives_on_threads<T>(n);
  }
}

TEST_CASE("ThreadCommunicator: threads the caller starts itself can share a Rendezvous") {
  Rendezvous world(3);
  std::vector<std::vector<float>> data(3, std::vector<float>(1000));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(world, r);
      for (std::size_t i = 0; i < 1000; ++i) data[std::size_t(r)][i] = float(r * 1000 + int(i));
      comm.all_reduce(std::span<float>(data[std::size_t(r)]), ReduceOp::max);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) CHECK(data[std::size_t(r)][999] == 2999.0f);
}

TEST_CASE("ThreadCommunicator: the same inputs give the same bits on every run") {
  ThreadGroup group(5);
  std::vector<std::vector<float>> first(5), second(5);
  for (auto* out : {&first, &second}) {
    auto task = [&](int rank) {
      auto comm = group.communicator(rank);
      std::vector<float> data = Fill<float>::values(rank, 100'003);
      if (rank == 3) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a different arrival order
      comm.all_reduce(std::span<float>(data), ReduceOp::sum);
      (*out)[std::size_t(rank)] = data;
    };
    group.run(task);
  }
  for (int r = 0; r < 5; ++r) CHECK(std::memcmp(first[std::size_t(r)].data(), second[std::size_t(r)].data(), 100'003 * 4) == 0);
}

TEST_CASE("ThreadCommunicator: mismatched calls end in a CommError on every rank, naming each rank's call") {
  ThreadGroup group(3);
  auto sizes_differ = [&](int rank) {
    std::vector<float> mine(std::size_t(10 + rank));
    group.communicator(rank).all_reduce(std::span<float>(mine), ReduceOp::sum);
  };
  CHECK_THROWS_WITH_AS(group.run(sizes_differ),
                       doctest::Contains("rank 0: all_reduce(sum) of 10 float; rank 1: all_reduce(sum) of 11 float; "
                                         "rank 2: all_reduce(sum) of 12 float"),
                       CommError);
  auto ops_differ = [&](int rank) {
    std::vector<float> mine(8);
    auto comm = group.communicator(rank);
    if (rank == 1) comm.broadcast(std::span<float>(mine), 0);
    else comm.all_reduce(std::span<float>(mine), ReduceOp::mean);
  };
  CHECK_THROWS_WITH_AS(group.run(ops_differ), doctest::Contains("rank 1: broadcast(root 0) of 8 float"), CommError);
  auto bad_scatter = [&](int rank) {
    std::vector<float> in(10), out(3);
    group.communicator(rank).reduce_scatter(std::span<float const>(in), std::span<float>(out), ReduceOp::sum);
  };
  CHECK_THROWS_WITH_AS(group.run(bad_scatter), doctest::Contains("reduce_scatter over 3 ranks into 3 needs 9"),
                       CommError);
  auto bad_root = [&](int rank) {
    std::vector<float> data(4);
    group.communicator(rank).broadcast(std::span<float>(data), 3);
  };
  CHECK_THROWS_WITH_AS(group.run(bad_root), doctest::Contains("root 3 is not a rank (0..2)"), CommError);
  // Every rank threw at the same point, so the group goes on working.
  auto fine = [&](int rank) {
    float x = float(rank);
    group.communicator(rank).all_reduce(std::span<float>(&x, 1), ReduceOp::sum);
    CHECK(x == 3.0f);
  };
  group.run(fine);
}

TEST_CASE("ThreadCommunicator: a rank that never arrives ends in a CommError naming who arrived, not a hang") {
  ThreadGroup group(3, std::chrono::milliseconds(300));
  auto missing_rank = [&](int rank) {
    if (rank == 2) return;  // forgets the collective
    std::vector<float> data(100);
    group.communicator(rank).all_reduce(std::span<float>(data), ReduceOp::sum);
  };
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(group.run(missing_rank),
                       doctest::Contains("timed out after 0.3 s; arrived: 0 (all_reduce(sum) of 100 float), 1 "
                                         "(all_reduce(sum) of 100 float); never arrived: 2"),
                       CommError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // A rank arriving after the abort throws at once instead of waiting.
  Rendezvous world(2, std::chrono::milliseconds(100));
  std::vector<float> data(4);
  ThreadCommunicator zero(world, 0), one(world, 1);
  CHECK_THROWS_WITH_AS(zero.all_reduce(std::span<float>(data), ReduceOp::sum),
                       doctest::Contains("never arrived: 1"), CommError);
  CHECK_THROWS_WITH_AS(one.all_reduce(std::span<float>(data), ReduceOp::sum),
                       doctest::Contains("the communicator was aborted"), GroupAborted);
  // The group resets for its next run.
  auto fine = [&](int rank) { group.communicator(rank).barrier(); };
  group.run(fine);
}

TEST_CASE("ThreadCommunicator: bad construction is refused with the value") {
  Rendezvous world(2);
  CHECK_THROWS_WITH_AS(ThreadCommunicator(world, 2), "ThreadCommunicator: rank 2 is not in 0..1", ConfigError);
  CHECK_THROWS_AS(Rendezvous(0), ConfigError);
  CHECK_THROWS_AS(Rendezvous(2, std::chrono::milliseconds(0)), ConfigError);
  Rendezvous one(1);
  ThreadCommunicator solo(one, 0);
  std::vector<float> in(4), out(3);
  CHECK_THROWS_WITH_AS(solo.all_reduce(std::span<float const>(in), std::span<float>(out), ReduceOp::sum),
                       doctest::Contains("input has 4 elements but output 3"), CommError);
}

TEST_CASE_TEMPLATE("Hierarchical over threads: processes x local replicas match the reference within rounding", T,
                   float, bf16, fp16) {
  float const relative = std::is_same_v<T, float> ? 2e-6f : std::is_same_v<T, bf16> ? 1.0f / 64 : 1.0f / 512;
  for (auto [processes, local_size] : {std::pair{1, 1}, {2, 1}, {1, 3}, {2, 2}, {3, 2}, {2, 3}}) {
    CAPTURE(processes);
    CAPTURE(local_size);
    // Threads stand in for processes: one Rendezvous per process, one per local rank.
    std::vector<std::unique_ptr<Rendezvous>> locals, globals;
    for (int p = 0; p < processes; ++p) locals.push_back(std::make_unique<Rendezvous>(local_size));
    for (int l = 0; l < local_size; ++l) globals.push_back(std::make_unique<Rendezvous>(processes));
    ThreadGroup group(processes * local_size);
    auto task = [&](int t) {
      int const p = t / local_size, l = t % local_size;
      ThreadCommunicator local(*locals[std::size_t(p)], l), global(*globals[std::size_t(l)], p);
      Hierarchical<ThreadCommunicator, ThreadCommunicator> comm(local, global);
      CHECK(comm.rank() == t);
      CHECK(comm.size() == processes * local_size);
      check_collectives<T>(comm, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops),
                           strata::test::Tolerance{relative});
    };
    group.run(task);
  }
}

namespace {
std::string segment_name(char const* what) { return "/strata-test-" + std::to_string(::getpid()) + "-" + what; }

// Threads stand in for processes: each rank maps the segment on its own, so the ranks share
// nothing but the segment (its addresses differ from rank to rank).
template <class Task>
void on_shm_ranks(int n, ShmOptions options, std::string const& name, Task task) {
  ThreadGroup group(n);
  auto each = [&](int rank) {
    ShmCommunicator comm =
        rank == 0 ? ShmCommunicator::create(name, n, options) : ShmCommunicator::open(name, rank, n, options);
    comm.barrier();  // every rank has it open: the name can go
    if (rank == 0) comm.unlink();
    task(comm);
  };
  group.run(each);
}
}  // namespace

TEST_CASE_TEMPLATE("ShmCommunicator: every collective equals the serial reference bit for bit, whole and in pieces", T,
                   float, bf16, fp16) {
  for (std::size_t staging : {std::size_t{4096}, ShmOptions{}.staging_bytes}) {
    for (int n = 1; n <= 4; ++n) {
      CAPTURE(staging);
      CAPTURE(n);
      on_shm_ranks(n, {.staging_bytes = staging}, segment_name("reference"), [&](ShmCommunicator& comm) {
        CHECK(comm.size() == n);
        check_collectives<T>(comm, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops));
      });
    }
  }
}

TEST_CASE("ShmCommunicator: its two halves under Hierarchical match the reference within rounding") {
  // Two "machines" of two ranks in shared memory each, joined by threads.
  std::vector<std::unique_ptr<Rendezvous>> across;
  for (int l = 0; l < 2; ++l) across.push_back(std::make_unique<Rendezvous>(2));
  ThreadGroup group(4);
  auto each = [&](int t) {
    int const machine = t / 2, place = t % 2;
    std::string const name = segment_name(machine == 0 ? "machine0" : "machine1");
    ShmCommunicator local = place == 0 ? ShmCommunicator::create(name, 2, {.staging_bytes = 4096})
                                       : ShmCommunicator::open(name, 1, 2, {.staging_bytes = 4096});
    ThreadCommunicator global(*across[std::size_t(place)], machine);
    Hierarchical<ShmCommunicator, ThreadCommunicator> comm(local, global);
    CHECK(comm.rank() == t);
    check_collectives<float>(comm, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops),
                             strata::test::Tolerance{2e-6f});
  };
  group.run(each);
}

TEST_CASE("ShmCommunicator: mismatched calls end in a CommError on every rank, and the group goes on") {
  on_shm_ranks(3, {}, segment_name("mismatch"), [](ShmCommunicator& comm) {
    int const rank = comm.rank();
    std::vector<float> mine(std::size_t(10 + rank));
    CHECK_THROWS_WITH_AS(comm.all_reduce(std::span<float>(mine), ReduceOp::sum),
                         doctest::Contains("ShmCommunicator: ranks called different collectives or sizes (rank 0: "
                                           "all_reduce(sum) of 10 float; rank 1: all_reduce(sum) of 11 float; rank 2: "
                                           "all_reduce(sum) of 12 float)"),
                         CommError);
    std::vector<float> in(10), out(3);
    CHECK_THROWS_WITH_AS(comm.reduce_scatter(std::span<float const>(in), std::span<float>(out), ReduceOp::sum),
                         doctest::Contains("reduce_scatter over 3 ranks into 3 needs 9"), CommError);
    std::vector<float> data(4, float(rank));
    CHECK_THROWS_WITH_AS(comm.broadcast(std::span<float>(data), 3), doctest::Contains("root 3 is not a rank (0..2)"),
                         CommError);
    float x = float(rank);
    comm.all_reduce(std::span<float>(&x, 1), ReduceOp::sum);
    CHECK(x == 3.0f);
  });
}

TEST_CASE("ShmCommunicator: a rank that never arrives ends in a CommError naming it, not a hang") {
  on_shm_ranks(2, {.timeout = std::chrono::milliseconds(300)}, segment_name("stall"), [](ShmCommunicator& comm) {
    std::vector<float> data(100);
    if (comm.rank() == 0) {
      auto const start = std::chrono::steady_clock::now();
      CHECK_THROWS_WITH_AS(comm.all_reduce(std::span<float>(data), ReduceOp::sum),
                           doctest::Contains("ShmCommunicator: all_reduce(sum) of 100 float on rank 0 of 2 timed out "
                                             "after 0.3 s; arrived: 0 (all_reduce(sum) of 100 float); never arrived: 1"),
                           CommError);
      CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));  // arrives after the abort
      CHECK_THROWS_WITH_AS(comm.all_reduce(std::span<float>(data), ReduceOp::sum),
                           doctest::Contains("the communicator was aborted"), GroupAborted);
    }
  });
}

TEST_CASE("ShmCommunicator: bad options and segments are refused with the value and the fix") {
  CHECK_THROWS_WITH_AS(ShmCommunicator::create(segment_name("small"), 2, {.staging_bytes = 100}),
                       doctest::Contains("staging_bytes 100 is too small for 2 ranks; give at least 256"), ConfigError);
  CHECK_THROWS_WITH_AS(ShmCommunicator::open(segment_name("rank"), 2, 2), doctest::Contains("rank 2 of 2 is not a rank"),
                       ConfigError);
  // More than /dev/shm holds: refused when the pages are reserved, not a SIGBUS later.
  CHECK_THROWS_WITH_AS(ShmCommunicator::create(segment_name("huge"), 1, {.staging_bytes = std::size_t{1} << 44}),
                       doctest::Contains("/dev/shm is too small"), CommError);
  std::string const name = segment_name("twice");
  ShmCommunicator first = ShmCommunicator::create(name, 2);
  CHECK_THROWS_WITH_AS(ShmCommunicator::create(name, 2), doctest::Contains("could not create shared-memory segment"),
                       CommError);
  CHECK_THROWS_WITH_AS(ShmCommunicator::open(name, 1, 3), doctest::Contains("every rank must give the same size"),
                       CommError);
  CHECK_THROWS_WITH_AS(ShmCommunicator::open(segment_name("absent"), 1, 2, {.timeout = std::chrono::milliseconds(50)}),
                       doctest::Contains("did not appear before the timeout"), CommError);
}
