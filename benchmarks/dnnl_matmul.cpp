// oneDNN's bf16 matmul alone, on the shapes of the MLP step's products, with the layouts
// strata gives it (core/dnnl.hpp): the same inputs and output every iteration, so they stay
// in cache. What the engine does when nothing else runs, against which GemmOnly/bf16 and the
// trainer's step (step_benchmark) show what the step around the products costs them:
//   Matmul/<product>/<replica samples>   one thread; FLOP counts a multiply-add as two
// The product names follow Dense: forward y = W x, weight gradient dW = dy x^T, input
// gradient dx = W^T dy. Needs a CPU with AVX512_BF16 (else every benchmark says skipped).
// Run: build/benchmarks/dnnl_matmul --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <strata.hpp>

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
BENCHMARK(forward_1024)->Name("Matmul/forward_1024/128")->UseRealTime();
BENCHMARK(forward_784)->Name("Matmul/forward_784/128")->UseRealTime();
BENCHMARK(weight_gradient_1024)->Name("Matmul/weight_gradient_1024/128")->UseRealTime();
BENCHMARK(weight_gradient_784)->Name("Matmul/weight_gradient_784/128")->UseRealTime();
BENCHMARK(input_gradient_1024)->Name("Matmul/input_gradient_1024/128")->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
