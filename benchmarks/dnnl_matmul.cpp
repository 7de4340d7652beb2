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
//   Update/<arrangement>/weight_gradient_1024/256_half   a weight gradient and the update of its
//                                               weights, one after the other or panel by panel (below)
// `.../threads:2`: two threads at once, each with its own factors, as Mirrored<2>'s replicas.
// The product names follow Dense: forward y = W x, weight gradient dW = dy x^T, input
// gradient dx = W^T dy. Needs a CPU with AVX512_BF16 (else every benchmark says skipped).
// Run: build/benchmarks/dnnl_matmul --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <immintrin.h>

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

// The same product with the weights in the layout oneDNN's matmul picks for itself
// (format_tag::any), reordered once outside the loop: what a plain layout costs it, which on
// AMX is a copy of the weights into tile order inside every product.
void matmul_blocked(benchmark::State& state, int n, int k, int m, tag src_layout) {
  if (!strata::bf16_products_available()) {
    state.SkipWithError("skipped: no AVX512_BF16");
    return;
  }
  strata::detail::dnnl_on_calling_thread();
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  dnnl::memory::desc const src_md({n, k}, dt::bf16, src_layout), plain_md({k, m}, dt::bf16, tag::ab),
      any_md({k, m}, dt::bf16, tag::any), dst_md({n, m}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc const pd(dnnl::matmul::desc(src_md, any_md, dst_md), engine);
  dnnl::memory src(src_md, engine), plain(plain_md, engine), weights(pd.weights_desc(), engine), dst(dst_md, engine);
  std::fill_n(static_cast<std::uint16_t*>(src.get_data_handle()), std::size_t(n) * k, std::uint16_t(0x3f80));
  std::fill_n(static_cast<std::uint16_t*>(plain.get_data_handle()), std::size_t(k) * m, std::uint16_t(0x3c00));
  dnnl::reorder(plain, weights).execute(stream, plain, weights);
  dnnl::matmul const product(pd);
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
void forward_1024_blocked(benchmark::State& s) { matmul_blocked(s, 128, 1024, 1024, tag::ab); }
void forward_1024_256_blocked(benchmark::State& s) { matmul_blocked(s, 256, 1024, 1024, tag::ab); }
void forward_1024_256(benchmark::State& s) { matmul(s, 256, 1024, 1024, tag::ab, tag::ab); }
BENCHMARK(forward_1024_blocked)->Name("Matmul/forward_1024/128/blocked_weights")->UseRealTime()->ThreadRange(1, 2);
BENCHMARK(forward_1024_256)->Name("Matmul/forward_1024/256")->UseRealTime()->ThreadRange(1, 2);
BENCHMARK(forward_1024_256_blocked)->Name("Matmul/forward_1024/256/blocked_weights")->UseRealTime()->ThreadRange(1, 2);
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

// Whether the update could hide inside the weight-gradient product (measured for issue 22;
// the step does not do this): OneDevice's share of Dense<1024, 1024>'s weight gradient on one
// of two intra-op threads (half the columns, 256 samples: dy packed by the product, the kept
// bf16 activations read transposed), and the update of those weights as the step's update
// runs it: SGD with momentum from the gradient times 1/256, then the refresh of the weights'
// bf16 and packed copies (train/replica_pass.hpp), 2,048 floats at a time.
//   Update/after_product   the whole product into the gradient, then the update (the step today)
//   Update/per_panel       each 8-column panel of the product, then at once the update of its
//                          8,192 weights, while their gradient is still in the caches
//   Update/per_panel_prefetched  the same, the product run one 32 x 8 tile at a time, each
//                          tile followed by prefetches (into L2) of 1/32 of the weights and
//                          velocity its panel's update reads
//   Update/product_only, Update/update_only   the two halves of after_product alone
// Four sets of everything (weights, velocity, gradient, copies, factors: 17 MiB a set, in
// huge pages as the trainer's arrays) are cycled through, so the update reads memory as in
// a step whose other layers run between two updates of these weights.
enum class UpdateMode { after_product, per_panel, per_panel_prefetched, product_only, update_only };

void weight_gradient_update(benchmark::State& state, UpdateMode mode) {
  namespace gemm = strata::bf16_gemm;
  if (!gemm::available()) {
    state.SkipWithError("skipped: no AVX512_BF16");
    return;
  }
  constexpr int m = 1024, n = 512, k = 256, sets = 4;
  constexpr std::size_t size = std::size_t(m) * n, chunk = 2048;
  strata::optim::Sgd const sgd{0.01f, 0.9f};
  struct Set {
    strata::AlignedBuffer weights{size}, gradient{size}, dy{std::size_t(m) * k};
    strata::AlignedArray<strata::bf16> x{std::size_t(n) * k};
    strata::optim::Sgd::State velocity;
    std::optional<strata::train::ReplicaWeights<strata::policy::Cpu, strata::bf16>> copies;
  };
  std::vector<strata::nn::ParameterTensor> const tensors{
      {"kernel", {n, m}, 0, true, strata::nn::ParameterTensor::TransposedReads::for_input_gradient}};
  std::vector<Set> all(sets);
  for (Set& s : all) {
    std::fill_n(s.weights.data(), size, 0.01f);
    std::fill_n(s.dy.data(), s.dy.size(), 0.5f);
    std::fill_n(s.x.data(), s.x.size(), strata::bf16(0.25f));
    s.velocity = sgd.make_state(size);
    s.copies.emplace(std::span<float const>(s.weights.data(), size), 1, tensors);
  }
  auto const rule = sgd.rule({1, 1.0f, true});
  auto update = [&](Set& s, std::size_t begin, std::size_t end) {
    for (std::size_t at = begin; at < end; at += chunk) {
      std::size_t const count = std::min(chunk, end - at);
      strata::optim::apply_rule(rule, std::span<float>(s.weights.data() + at, count),
                                strata::optim::SummedGradient{s.gradient.data() + at, nullptr, 1.0f / 256},
                                s.velocity, at);
      s.copies->refresh(at, at + count);
    }
  };
  strata::AlignedArray<strata::bf16> packed_dy(gemm::packed_a_size(m, k)), packed_x(gemm::packed_b_size(k, n));
  constexpr std::size_t lines_per_tile = std::size_t(gemm::panel_rows) * gemm::panel_columns / 16;  // of 16 floats
  int next = 0;
  for (auto _ : state) {
    Set& s = all[std::size_t(next)];
    next = (next + 1) % sets;
    if (mode == UpdateMode::update_only) {
      update(s, 0, size);
      continue;
    }
    gemm::pack_a(packed_dy.data(), gemm::Factor<float>{s.dy.data(), m, false}, m, k);
    gemm::ColumnPairs const columns =
        gemm::columns_of(gemm::Factor<strata::bf16>{s.x.data(), n, true}, k, n, packed_x.data());
    if (mode == UpdateMode::after_product || mode == UpdateMode::product_only) {
      gemm::multiply(packed_dy.data(), columns, m, n, k, 1.0f, 0.0f, s.gradient.data(), m);
      if (mode == UpdateMode::after_product) update(s, 0, size);
      continue;
    }
    for (int j0 = 0; j0 < n; j0 += gemm::panel_columns) {
      gemm::ColumnPairs const panel{columns.data + gemm::pair_offset(gemm::panel_columns, k, j0, 0), true, 0};
      std::size_t const first = std::size_t(j0) * m;
      float* const c = s.gradient.data() + first;
      if (mode == UpdateMode::per_panel) {
        gemm::multiply(packed_dy.data(), panel, m, gemm::panel_columns, k, 1.0f, 0.0f, c, m);
      } else {
        for (int i0 = 0; i0 < m; i0 += gemm::panel_rows) {
          gemm::multiply(packed_dy.data() + gemm::pair_offset(gemm::panel_rows, k, i0, 0), panel, gemm::panel_rows,
                         gemm::panel_columns, k, 1.0f, 0.0f, c + i0, m);
          std::size_t const tile = first + std::size_t(i0 / gemm::panel_rows) * lines_per_tile * 16;
          for (std::size_t l = 0; l < lines_per_tile; ++l) {
            _mm_prefetch(reinterpret_cast<char const*>(s.weights.data() + tile + 16 * l), _MM_HINT_T1);
            _mm_prefetch(reinterpret_cast<char const*>(s.velocity.velocity.data() + tile + 16 * l), _MM_HINT_T1);
          }
        }
      }
      update(s, first, first + std::size_t(gemm::panel_columns) * m);
    }
  }
  benchmark::DoNotOptimize(all.front().weights.data());
  if (mode != UpdateMode::update_only)
    state.counters["FLOP"] = benchmark::Counter(2.0 * m * k * n, benchmark::Counter::kIsIterationInvariantRate);
}
void register_update_benchmarks() {
  using enum UpdateMode;
  for (auto const& [name, mode] : {std::pair{"after_product", after_product}, std::pair{"per_panel", per_panel},
                                   std::pair{"per_panel_prefetched", per_panel_prefetched},
                                   std::pair{"product_only", product_only}, std::pair{"update_only", update_only}}) {
    std::string const full = std::string("Update/") + name + "/weight_gradient_1024/256_half";
    benchmark::RegisterBenchmark(full.c_str(), [mode](benchmark::State& s) { weight_gradient_update(s, mode); })
        ->UseRealTime()
        ->ThreadRange(1, 2);
  }
}
int const update_registered = (register_update_benchmarks(), 0);

}  // namespace

BENCHMARK_MAIN();
