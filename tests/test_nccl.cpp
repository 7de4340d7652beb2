// NcclCommunicator. `test_nccl` runs what needs no GPU (refusals); `test_nccl --gpu` runs
// every collective on every GPU of the machine against the serial reference, bootstrap and
// timeouts, and exits 77 (CTest: skipped) when there is no GPU. Needs no Eigen or Boost, so
// scripts/gpu-check can build it on a machine with only the CUDA toolkit.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm_reference.hpp"
#include "gpu_main.hpp"
#include "strata/comm/nccl_communicator.hpp"
#include "strata/comm/thread_communicator.hpp"

using namespace strata;
using namespace strata::comm;
using namespace std::chrono_literals;

namespace {
constexpr std::size_t sizes[] = {0, 1, 2, 3, 7, 13, 31, 1000, 1021, 4099, 1 << 20};
constexpr ReduceOp ops[] = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min};

void cuda_check(cudaError_t rc) {
  if (rc != cudaSuccess) throw std::runtime_error(cudaGetErrorString(rc));
}

// Presents a NcclCommunicator with host spans (copy to the device, run, copy back), so the
// reference checks written for host engines serve it unchanged.
struct HostStaged {
  NcclCommunicator* comm;
  [[nodiscard]] int rank() const { return comm->rank(); }
  [[nodiscard]] int size() const { return comm->size(); }

  template <class T>
  struct Device {
    T* ptr = nullptr;
    std::size_t n = 0;
    explicit Device(std::size_t count) : n(count) { cuda_check(cudaMalloc(&ptr, std::max<std::size_t>(1, n) * sizeof(T))); }
    Device(std::span<T const> host) : Device(host.size()) {
      cuda_check(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    }
    ~Device() { cudaFree(ptr); }
    void to(std::span<T> host) const { cuda_check(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost)); }
    std::span<T> span() { return {ptr, n}; }
  };

  template <class T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    Device<T> d{std::span<T const>(data)};
    comm->all_reduce(d.span(), op);
    d.to(data);
  }
  template <class T>
  void all_reduce(std::span<T const> in, std::span<T> out, ReduceOp op) {
    Device<T> a(in), b(out.size());
    comm->all_reduce(std::span<T const>(a.span()), b.span(), op);
    b.to(out);
  }
  template <class T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, ReduceOp op) {
    Device<T> a(in), b(out.size());
    comm->reduce_scatter(std::span<T const>(a.span()), b.span(), op);
    b.to(out);
  }
  template <class T>
  void all_gather(std::span<T const> in, std::span<T> out) {
    Device<T> a(in), b(out.size());
    comm->all_gather(std::span<T const>(a.span()), b.span());
    b.to(out);
  }
  template <class T>
  void broadcast(std::span<T> data, int root) {
    Device<T> d{std::span<T const>(data)};
    comm->broadcast(d.span(), root);
    d.to(data);
  }
  void barrier() { comm->barrier(); }
};

template <class T>
void every_collective_on_every_gpu() {
  std::vector<int> devices(static_cast<std::size_t>(cuda_device_count()));
  for (std::size_t i = 0; i < devices.size(); ++i) devices[i] = int(i);
  auto comms = NcclCommunicator::create_all(devices);
  std::vector<std::thread> threads;  // one thread per GPU, as Mirrored<N> on Cuda will run
  std::vector<std::string> errors(comms.size());
  for (std::size_t i = 0; i < comms.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        HostStaged staged{&comms[i]};
        strata::test::check_collectives<T>(staged, std::span<std::size_t const>(sizes), std::span<ReduceOp const>(ops));
      } catch (std::exception const& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto const& e : errors) CHECK_MESSAGE(e.empty(), e);
}
}  // namespace

TEST_CASE("NcclCommunicator refuses a device that does not exist, with the count it sees") {
  int const count = cuda_device_count();
  int const missing = count;
  ncclUniqueId id{};
  std::string const expected = "device " + std::to_string(missing) + " does not exist (this process sees " +
                               std::to_string(count) + " CUDA devices)";
  CHECK_THROWS_WITH_AS(NcclCommunicator(id, 0, 1, missing),
                       doctest::Contains(expected.c_str()),
                       ConfigError);
  CHECK_THROWS_WITH_AS(NcclCommunicator(id, 2, 2, 0), "NcclCommunicator: rank 2 is not in 0..1", ConfigError);
}

TEST_CASE_TEMPLATE("gpu: every collective on every GPU equals the serial reference", T, float, bf16, fp16) {
  int version = 0;
  ncclGetVersion(&version);
  MESSAGE("GPUs: " << cuda_device_count() << ", NCCL " << version);
  every_collective_on_every_gpu<T>();
}

TEST_CASE("gpu: bootstrap over another communicator, and malformed sizes refused before NCCL sees them") {
  Rendezvous world(1);
  ThreadCommunicator bootstrap(world, 0);
  auto comm = NcclCommunicator::over(bootstrap, 0);
  CHECK(comm.size() == 1);
  HostStaged staged{&comm};
  std::vector<float> x(5, 2.0f);
  staged.all_reduce(std::span<float>(x), ReduceOp::mean);
  CHECK(x[4] == 2.0f);
  HostStaged::Device<float> in(10), out(3);
  CHECK_THROWS_WITH_AS(comm.reduce_scatter(std::span<float const>(in.span()), out.span(), ReduceOp::sum),
                       doctest::Contains("reduce_scatter over 1 ranks into 3 needs 3"), CommError);
  comm.barrier();  // still usable: nothing was issued
}

TEST_CASE("gpu: a rank that never joins ends creation with a CommError after the timeout, not a hang") {
  ncclUniqueId const id = NcclCommunicator::unique_id();
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(NcclCommunicator(id, 0, 2, 0, {.timeout = 3s}), doctest::Contains("not every rank joined"),
                       CommError);
  CHECK(std::chrono::steady_clock::now() - start < 30s);
}

TEST_CASE("gpu: two ranks on one GPU are refused by NCCL with its reason") {
  if (cuda_device_count() != 1) return;
  int const same[] = {0, 0};
  CHECK_THROWS_AS(NcclCommunicator::create_all(same, {.timeout = 20s}), CommError);
}

int main(int argc, char** argv) { return gpu_test_main(argc, argv, "NCCL", 240); }
