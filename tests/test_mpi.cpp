// MpiCommunicator, Hierarchical<ThreadCommunicator, MpiCommunicator> and ProcessCommunicator
// (shared memory between the processes of a machine), run under mpirun with 2 and 3
// processes (CTest mpi.np2, mpi.np3; mpi.np4 runs the ProcessCommunicator cases, which
// split 4 processes into 2 "machines"). Every process runs the same test cases in the same
// order; the exit code is the worst over all processes.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "comm_reference.hpp"
#include "mpi_world.hpp"
#include "strata/comm/hierarchical.hpp"
#include "strata/comm/mpi_communicator.hpp"
#include "strata/comm/process_communicator.hpp"
#include "strata/comm/thread_group.hpp"

using namespace strata;
using namespace strata::comm;
using strata::test::check_collectives;
using strata::test::Tolerance;
using namespace std::chrono_literals;

namespace {
constexpr std::size_t sizes[] = {0, 1, 2, 3, 7, 13, 31, 1000, 1021, 4099};
constexpr ReduceOp ops[] = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min};

// MPI sums two ranks in either order with the same bits; from three on, its algorithms
// pick their own order, so results are compared within rounding.
template <class T>
Tolerance mpi_tolerance(int ranks) {
  if (ranks <= 2) return {};
  return {std::is_same_v<T, float> ? 2e-6f : std::is_same_v<T, bf16> ? 1.0f / 64 : 1.0f / 512};
}
}  // namespace

TEST_CASE_TEMPLATE("MpiCommunicator: every collective equals the serial reference", T, float, bf16, fp16) {
  MpiCommunicator comm;
  CHECK(comm.rank() == world_rank());
  CHECK(comm.size() == world_size());
  check_collectives<T>(comm, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops),
                       mpi_tolerance<T>(comm.size()));
}

TEST_CASE("MpiCommunicator: without verification the results are the same") {
  MpiCommunicator comm(MPI_COMM_WORLD, {.verify = false});
  check_collectives<float>(comm, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops),
                           mpi_tolerance<float>(comm.size()));
}

TEST_CASE("MpiCommunicator: mismatched calls end in a CommError on every rank, naming each rank's call") {
  MpiCommunicator comm;
  std::vector<float> mine(std::size_t(10 + comm.rank()));
  CHECK_THROWS_WITH_AS(comm.all_reduce(std::span<float>(mine), ReduceOp::sum),
                       doctest::Contains("rank 0: all_reduce(sum) of 10 float; rank 1: all_reduce(sum) of 11 float"),
                       CommError);
  std::vector<float> eight(8);
  auto mixed = [&] {
    if (comm.rank() == 1) comm.broadcast(std::span<float>(eight), 0);
    else comm.all_reduce(std::span<float>(eight), ReduceOp::max);
  };
  CHECK_THROWS_WITH_AS(mixed(), doctest::Contains("rank 1: broadcast(root 0) of 8 float"), CommError);
  // Nothing moved, so the communicator goes on working.
  float x = 1.0f;
  comm.all_reduce(std::span<float>(&x, 1), ReduceOp::sum);
  CHECK(x == float(comm.size()));
}

TEST_CASE("MpiCommunicator: a rank that never arrives ends in a CommError naming who arrived, not a hang") {
  MpiCommunicator comm(MPI_COMM_WORLD, {.timeout = 300ms});
  if (comm.rank() == 0) {
    std::vector<float> data(100);
    auto const start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(comm.all_reduce(std::span<float>(data), ReduceOp::sum),
                         doctest::Contains("timed out after 0.3 s; arrived: 0 (all_reduce(sum) of 100 float); "
                                           "never arrived: 1"),
                         CommError);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    CHECK_THROWS_WITH_AS(comm.barrier(), doctest::Contains("broken by an earlier timeout"), CommError);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("MpiCommunicator: without verification a timeout still ends the wait") {
  MpiCommunicator comm(MPI_COMM_WORLD, {.timeout = 300ms, .verify = false});
  if (comm.rank() == 0) {
    CHECK_THROWS_WITH_AS(comm.barrier(), doctest::Contains("timed out after 0.3 s; verify is off"), CommError);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE_TEMPLATE("Hierarchical: 2 replica threads per process over MPI match the reference within rounding", T,
                   float, bf16) {
  constexpr int local_size = 2;
  // One MPI communicator per local rank, created in the same order on every process.
  std::vector<std::unique_ptr<MpiCommunicator>> globals;
  for (int l = 0; l < local_size; ++l) globals.push_back(std::make_unique<MpiCommunicator>());
  ThreadGroup group(local_size);
  float const relative = std::is_same_v<T, float> ? 2e-6f : 1.0f / 64;
  auto task = [&](int l) {
    ThreadCommunicator local = group.communicator(l);
    Hierarchical<ThreadCommunicator, MpiCommunicator> comm(local, *globals[std::size_t(l)]);
    CHECK(comm.rank() == world_rank() * local_size + l);
    check_collectives<T>(comm, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops),
                         Tolerance{relative});
  };
  group.run(task);
}

TEST_CASE_TEMPLATE("ProcessCommunicator: one machine meets in shared memory, bit for bit the rank-order reference", T,
                   float, bf16, fp16) {
  for (std::size_t staging : {std::size_t{4096}, ProcessOptions{}.staging_bytes}) {
    CAPTURE(staging);
    ProcessCommunicator comm(MPI_COMM_WORLD, {.staging_bytes = staging});
    CHECK(comm.transport() == Transport::shared_memory);
    CHECK(comm.rank() == world_rank());
    CHECK(comm.size() == world_size());
    check_collectives<T>(comm, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops));
  }
}

TEST_CASE("ProcessCommunicator: machines of two processes join over MPI; uneven ones fall back to MPI") {
  // Consecutive pairs of ranks stand in for machines.
  MPI_Comm machine = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() / 2, world_rank(), &machine);
  {
    ProcessCommunicator comm(MPI_COMM_WORLD, machine, {.staging_bytes = 4096});
    bool const even = world_size() % 2 == 0;
    CHECK(comm.transport() == (even && world_size() > 2 ? Transport::shared_memory_and_mpi
                               : even                   ? Transport::shared_memory
                                                        : Transport::mpi));
    CHECK(comm.rank() == world_rank());
    check_collectives<float>(comm, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops),
                             mpi_tolerance<float>(world_size() + 1));  // summed in a tree across machines
  }
  MPI_Comm_free(&machine);
}

TEST_CASE("ProcessCommunicator: STRATA_SHM_DISABLE=1 in any process, or shared_memory = false, means MPI") {
  if (world_rank() == world_size() - 1) ::setenv("STRATA_SHM_DISABLE", "1", 1);
  ProcessCommunicator disabled;
  ::unsetenv("STRATA_SHM_DISABLE");
  CHECK(disabled.transport() == Transport::mpi);
  ProcessCommunicator off(MPI_COMM_WORLD, {.shared_memory = false});
  CHECK(off.transport() == Transport::mpi);
  float x = float(world_rank());
  off.all_reduce(std::span<float>(&x, 1), ReduceOp::sum);
  CHECK(x == float(world_size() * (world_size() - 1) / 2));
}

TEST_CASE("ProcessCommunicator: a process that never arrives is named after the timeout, not a hang") {
  ProcessCommunicator comm(MPI_COMM_WORLD, {.timeout = 300ms});
  if (comm.rank() == 0) {
    std::vector<float> data(100);
    std::string const expected =
        "ShmCommunicator: all_reduce(sum) of 100 float on rank 0 of " + std::to_string(world_size()) + " timed out";
    CHECK_THROWS_WITH_AS(comm.all_reduce(std::span<float>(data), ReduceOp::sum), doctest::Contains(expected.c_str()),
                         CommError);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<float> late(100);
  if (comm.rank() != 0)
    CHECK_THROWS_WITH_AS(comm.all_reduce(std::span<float>(late), ReduceOp::sum),
                         doctest::Contains("the communicator was aborted"), CommError);
}

int main(int argc, char** argv) {
  MpiEnvironment mpi(argc, argv);
  doctest::Context context(argc, argv);
  int const failed = context.run();
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
