// oneDNN's bf16 matmul alone, on the shapes of the MLP step's products, with the layouts
// strata gives it (core/dnnl.hpp), and strata's own bf16 kernel (core/bf16_gemm.hpp) on the
// same products: the same inputs and output every iteration, so they stay in cache. What
// the engines do when nothing else runs, against which GemmOnly/bf16 and the trainer's step
// (step_benchmark) show what the step around the products costs them:
//   Matmul/<product>/<replica samples>          oneDNN, one thread; FLOP counts a multiply-add as two
//   Kernel/<product>/<replica samples>          strata's kernel: the weights packed once, outside
//                                               the loop (as a step could pack them when it writes
//                                               them); the activations packed in every product
//   Kernel/<product>/<replica samples>/packing  the weights packed in every product too, as oneDNN does
//   Kernel/weight_gradient_<k>/256_half         OneDevice's share of a weight gradient on one of two
//                                               intra-op threads: half the output columns, all 256
//                                               samples (the forward and input-gradient shares are
//                                               the 128-sample shapes above)
//   Pack/activations_<k>/<replica samples>      the kernel packing a forward product's activations (floats)
// `.../threads:2`: two threads at once, each with its own factors, as Mirrored<2>'s replicas.
// The product names follow Dense: forward y = W x, weight gradient dW = dy x^T, input
// gradient dx = W^T dy. Needs a CPU with AVX512_BF16 (else every benchmark says skipped).
// Run: build/benchmarks/dnnl_matmul --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <strata.hpp>
#include <strata/core/bf16_gemm.hpp>

namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// dst (n x m, row-major) = src (n x k) * weights (k x m), as strata maps its column-major
// c = op(a) op(b) onto oneDNN (core/dnnl.hpp): a transposed factor is a swap of strides.
void matmul(benchmark::State& state, int n, int k, int m, tag src_layout, tag weights_layout) {
  if (!strata::bf16_products_available()) {
    state.SkipWithError("skipped: no AVX512_BF16");
    return;
  }
  strata::detail::dnnl_on_calling_thread();  // one OpenMP thread, as strata runs every product
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  dnnl::memory::desc const src_md({n, k}, dt::bf16, src_layout), weights_md({k, m}, dt::bf16, weights_layout),
      dst_md({n, m}, dt::f32, tag::ab);
  dnnl::memory src(src_md, engine), weights(weights_md, engine), dst(dst_md, engine);
  std::fill_n(static_cast<std::uint16_t*>(src.get_data_handle()), std::size_t(n) * k, std::uint16_t(0x3f80));  // 1.0
  std::fill_n(static_cast<std::uint16_t*>(weights.get_data_handle()), std::size_t(k) * m, std::uint16_t(0x3c00));
  dnnl::matmul const product(dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, weights_md, dst_md), engine));
  for (auto _ : state) {
    product.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  }
  state.counters["FLOP"] = benchmark::Counter(2.0 * n * k * m, benchmark::Counter::kIsIterationInvariantRate);
}

// Per replica of Mirrored<2> (128 samples), with Dense<1024, 1024> and Dense<784, 1024>.
void forward_1024(benchmark::State& s) { matmul(s, 128, 1024, 1024, tag::ab, tag::ab); }
void forward_784(benchmark::State& s) { matmul(s, 128, 784, 1024, tag::ab, tag::ab); }
void weight_gradient_1024(benchmark::State& s) { matmul(s, 1024, 128, 1024, tag::ba, tag::ab); }
void weight_gradient_784(benchmark::State& s) { matmul(s, 784, 128, 1024, tag::ba, tag::ab); }
void input_gradient_1024(benchmark::State& s) { matmul(s, 128, 1024, 1024, tag::ab, tag::ba); }
BENCHMARK(forward_1024)->Name("Matmul/forward_1024/128")->UseRealTime()->ThreadRange(1, 2);
BENCHMARK(forward_784)->Name("Matmul/forward_784/128")->UseRealTime()->ThreadRange(1, 2);
BENCHMARK(weight_gradient_1024)->Name("Matmul/weight_gradient_1024/128")->UseRealTime()->ThreadRange(1, 2);
BENCHMARK(weight_gradient_784)->Name("Matmul/weight_gradient_784/128")->UseRealTime()->ThreadRange(1, 2);
BENCHMARK(input_gradient_1024)->Name("Matmul/input_gradient_1024/128")->UseRealTime()->ThreadRange(1, 2);

// strata's kernel on c (m x n) = op(a) (m x k) op(b) (k x n), column-major as Dense holds
// its factors; bf16 inputs (the values are those of the oneDNN rows: they do not change the
// time). `a` is the weights' side; packing it per product or once is `pack_a_every_time`.
void kernel(benchmark::State& state, int m, int n, int k, bool transpose_a, bool transpose_b,
            bool pack_a_every_time) {
  namespace gemm = strata::bf16_gemm;
  if (!gemm::available()) {
    state.SkipWithError("skipped: no AVX512_BF16");
    return;
  }
  std::vector<strata::bf16> a(std::size_t(m) * k, strata::bf16(1.0f)), b(std::size_t(k) * n, strata::bf16(1.0f));
  std::vector<strata::bf16> packed_a(gemm::packed_a_size(m, k)), packed_b(gemm::packed_b_size(k, n));
  std::vector<float> c(std::size_t(m) * n);
  gemm::Factor<strata::bf16> const a_factor{a.data(), transpose_a ? k : m, transpose_a},
      b_factor{b.data(), transpose_b ? n : k, transpose_b};
  gemm::pack_a(packed_a.data(), a_factor, m, k);
  for (auto _ : state) {
    if (pack_a_every_time) gemm::pack_a(packed_a.data(), a_factor, m, k);
    gemm::ColumnPairs const columns = gemm::columns_of(b_factor, k, n, packed_b.data());
    gemm::multiply(packed_a.data(), columns, m, n, k, 1.0f, 0.0f, c.data(), m);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOP"] = benchmark::Counter(2.0 * m * k * n, benchmark::Counter::kIsIterationInvariantRate);
}

// Dense's products (nn/dense.hpp): forward y = W x, weight gradient dW = dy x^T, input
// gradient dx = W^T dy; W is out x in. The weight gradient packs both factors every time.
void register_kernels() {
  struct Product {
    char const* name;
    int m, n, k;
    bool transpose_a, transpose_b, a_is_weights;
    char const* samples = "128";  // what each thread's share is: a replica's 128 samples, or
                                  // half the columns of OneDevice's 256 ("256_half")
  };
  for (Product const& p : {Product{"forward_1024", 1024, 128, 1024, false, false, true},
                           Product{"forward_784", 1024, 128, 784, false, false, true},
                           Product{"weight_gradient_1024", 1024, 1024, 128, false, true, false},
                           Product{"weight_gradient_784", 1024, 784, 128, false, true, false},
                           Product{"weight_gradient_1024", 1024, 512, 256, false, true, false, "256_half"},
                           Product{"weight_gradient_784", 1024, 392, 256, false, true, false, "256_half"},
                           Product{"input_gradient_1024", 1024, 128, 1024, true, false, true}}) {
    for (bool const every_time : {false, true}) {
      if (every_time && !p.a_is_weights) continue;
      std::string const name =
          std::string("Kernel/") + p.name + "/" + p.samples + (every_time ? "/packing" : "");
      benchmark::RegisterBenchmark(name.c_str(),
                                   [p, every_time](benchmark::State& s) {
                                     kernel(s, p.m, p.n, p.k, p.transpose_a, p.transpose_b, every_time);
                                   })
          ->UseRealTime()
          ->ThreadRange(1, 2);
    }
  }
}
int const registered = (register_kernels(), 0);

// What the kernel's forward products do first in the step: pack the activations, k x n floats
// as the previous layer left them (op(b) not transposed), into the kernel's layout.
void pack_activations(benchmark::State& state, int k) {
  namespace gemm = strata::bf16_gemm;
  if (!gemm::available()) {
    state.SkipWithError("skipped: no AVX512_BF16");
    return;
  }
  int const n = 128;
  std::vector<float> x(std::size_t(k) * n, 1.0f);
  std::vector<strata::bf16> packed(gemm::packed_b_size(k, n));
  for (auto _ : state) {
    gemm::pack_b(packed.data(), gemm::Factor<float>{x.data(), k, false}, k, n);
    benchmark::DoNotOptimize(packed.data());
  }
  state.counters["bytes"] =
      benchmark::Counter(double(x.size() * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(pack_activations, 784, 784)->Name("Pack/activations_784/128")->UseRealTime();
BENCHMARK_CAPTURE(pack_activations, 1024, 1024)->Name("Pack/activations_1024/128")->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
