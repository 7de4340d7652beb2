// Checkpoint throughput for a 100 MB model (Dense<5000, 5000>: 25,005,000 floats) against
// the disk itself, measured in the same run:
//   Disk/write      write() the same number of bytes to a new file, fsync, close: the
//                   durable sequential write speed a checkpoint can at best reach
//   Checkpoint/save save_checkpoint: CRC-32, header, write, fsync, rename, directory fsync
//   Disk/read       pread the file back into memory
//   Checkpoint/load load_checkpoint: read, validate, CRC-32, copy into the model
//   Crc32           zlib's CRC-32 over the same bytes (the checksum's own cost)
// Reads are measured with a warm page cache (/0) and, when run as root, cold (/1: the
// cache is dropped before each read).
//
//   checkpoint_io [--benchmark_repetitions=5] (files go to $TMPDIR or /tmp)

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "strata.hpp"

namespace {
using Model = strata::Sequential<strata::Dense<5000, 5000>>;

std::filesystem::path const& scratch() {
  static std::filesystem::path const dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("strata-checkpoint-bench-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

Model& model() {
  static Model m(1);
  return m;
}

std::size_t const bytes = Model::parameter_count * sizeof(float);

// Drops the page cache (root only), so the next read comes from the disk.
bool drop_caches() {
  ::sync();
  std::ofstream drop("/proc/sys/vm/drop_caches");
  drop << "1" << std::endl;
  return bool(drop);
}

void raw_write(std::filesystem::path const& path, std::span<float const> data) {
  int const fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  char const* p = reinterpret_cast<char const*>(data.data());
  std::size_t left = data.size_bytes();
  while (left > 0) {
    ssize_t const n = ::write(fd, p, left);
    if (n <= 0) std::abort();
    p += n;
    left -= std::size_t(n);
  }
  ::fsync(fd);
  ::close(fd);
}

void Disk_write(benchmark::State& state) {
  auto const values = model().parameters().first(Model::parameter_count);
  for (auto _ : state) raw_write(scratch() / "raw.bin", values);
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(bytes));
}

void Checkpoint_save(benchmark::State& state) {
  for (auto _ : state) strata::save_checkpoint(scratch() / "model.safetensors", model());
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(bytes));
}

void Disk_read(benchmark::State& state) {
  raw_write(scratch() / "raw.bin", model().parameters().first(Model::parameter_count));
  std::vector<char> buffer(bytes);
  for (auto _ : state) {
    if (state.range(0) == 1) {
      state.PauseTiming();
      if (!drop_caches()) state.SkipWithError("dropping the page cache needs root");
      state.ResumeTiming();
    }
    int const fd = ::open((scratch() / "raw.bin").c_str(), O_RDONLY);
    std::size_t done = 0;
    while (done < bytes) {
      ssize_t const n = ::pread(fd, buffer.data() + done, bytes - done, off_t(done));
      if (n <= 0) std::abort();
      done += std::size_t(n);
    }
    ::close(fd);
    benchmark::DoNotOptimize(buffer.data());
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(bytes));
}

void Checkpoint_load(benchmark::State& state) {
  strata::save_checkpoint(scratch() / "model.safetensors", model());
  static Model target(2);
  for (auto _ : state) {
    if (state.range(0) == 1) {
      state.PauseTiming();
      if (!drop_caches()) state.SkipWithError("dropping the page cache needs root");
      state.ResumeTiming();
    }
    strata::load_checkpoint(scratch() / "model.safetensors", target);
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(bytes));
}

void Crc32(benchmark::State& state) {
  auto const values = model().parameters();
  for (auto _ : state)
    benchmark::DoNotOptimize(strata::io::detail::crc32_update(0, values.data(), bytes));
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(bytes));
}

BENCHMARK(Disk_write)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Checkpoint_save)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Disk_read)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Checkpoint_load)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Crc32)->Unit(benchmark::kMillisecond)->UseRealTime();

struct Cleanup {
  ~Cleanup() { std::filesystem::remove_all(scratch()); }
} cleanup;

}  // namespace

BENCHMARK_MAIN();
