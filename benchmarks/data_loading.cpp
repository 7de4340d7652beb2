// Reading Fashion-MNIST's training split from Debian's gzip files (47 MB of pixels
// decompressed, 188 MB as floats), as every example and many tests do at start:
//   ReadFile/grown      the images file decompressed into a string that grows as it is read
//                       (data::read_file before it reserved the size the gzip trailer records)
//   ReadFile/reserved   data::read_file: the string reserved once, no copies as it grows
//   Load/copied         the images and labels read, their bytes copied into IdxArrays, then
//                       converted to floats (load_idx before it converted from the bytes read)
//   Load/in_place       data::fashion_mnist(Split::train): converted from the bytes read
// Run: cmake --build build --target data_loading && build/benchmarks/data_loading
//        --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <zlib.h>

#include <strata/data/fashion_mnist.hpp>

namespace {

using namespace strata;

std::filesystem::path images_path() { return data::fashion_mnist_directory() / "train-images-idx3-ubyte.gz"; }
std::filesystem::path labels_path() { return data::fashion_mnist_directory() / "train-labels-idx1-ubyte.gz"; }

std::string read_grown(std::filesystem::path const& path) {  // errors are data::read_file's concern
  gzFile file = gzopen(path.c_str(), "rb");
  gzbuffer(file, 1 << 17);
  std::string content;
  char chunk[1 << 16];
  for (int got; (got = gzread(file, chunk, sizeof chunk)) > 0;) content.append(chunk, std::size_t(got));
  gzclose(file);
  return content;
}

void read_file_grown(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(read_grown(images_path()).size());
}
BENCHMARK(read_file_grown)->Name("ReadFile/grown")->Unit(benchmark::kMillisecond)->UseRealTime();

void read_file_reserved(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(data::read_file(images_path()).size());
}
BENCHMARK(read_file_reserved)->Name("ReadFile/reserved")->Unit(benchmark::kMillisecond)->UseRealTime();

void load_copied(benchmark::State& state) {
  for (auto _ : state) {
    data::IdxArray const images = data::parse_idx(read_grown(images_path()), "images");
    data::IdxArray const labels = data::parse_idx(read_grown(labels_path()), "labels");
    std::size_t const n = images.dims[0];
    Matrix features{Eigen::Index(images.values.size() / n), Eigen::Index(n)};
    for (std::size_t i = 0; i < images.values.size(); ++i) features.data()[i] = float(images.values[i]) * (1.0f / 255.0f);
    Matrix targets(1, Eigen::Index(n));
    for (std::size_t i = 0; i < n; ++i) targets(0, Eigen::Index(i)) = float(labels.values[i]);
    data::Dataset const dataset(std::move(features), std::move(targets));
    benchmark::DoNotOptimize(dataset.size());
  }
}
BENCHMARK(load_copied)->Name("Load/copied")->Unit(benchmark::kMillisecond)->UseRealTime();

void load_in_place(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(data::fashion_mnist(data::Split::train).size());
}
BENCHMARK(load_in_place)->Name("Load/in_place")->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
