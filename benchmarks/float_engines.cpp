// oneDNN's and OpenBLAS's float GEMM side by side, on the products of the flagship example's
// and the anchor MLP's steps, one replica's share each: which engine should multiply which
// float product on this CPU (core/dnnl.hpp, detail::dnnl_avx2_slow_float_product).
//   FloatProduct/<engine>/<model>_<product>/<m>x<k>x<n>
// c (m x n) = op(a) op(b) with k the inner dimension. The product names follow Dense: forward
// y = W x (no transposes), weight gradient dW = dy x^T (b transposed), input gradient
// dx = W^T dy (a transposed). `.../threads:2`: two threads at once, each with its own
// factors, as Mirrored<2>'s replicas (GFLOP_per_second: both threads together). The same
// factors every iteration, as a step's weights; FLOP counts a multiply-add as two.
// Run: build/benchmarks/float_engines --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// (and STRATA_FLOAT_ENGINES_GRID, below, for a grid of shapes)

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include <strata/core/backend.hpp>

#if !defined(STRATA_DNNL_OPENBLAS)
#error "float_engines needs strata::dnnl with OpenBLAS beside it (built where both are found)"
#endif

namespace {

struct Product {
  char const* name;
  bool trans_a, trans_b;
  int m, k, n;
};

// One replica's products: the flagship (784-256-10, batch 128 on two replicas) and the anchor
// MLP (784-1024-1024-10, batch 256 on two replicas).
std::vector<Product> const products = {
    {"flagship_forward_1", false, false, 256, 784, 64},      {"flagship_forward_2", false, false, 10, 256, 64},
    {"flagship_weight_gradient_1", false, true, 256, 64, 784}, {"flagship_weight_gradient_2", false, true, 10, 64, 256},
    {"flagship_input_gradient_2", true, false, 256, 10, 64},  {"anchor_forward_1", false, false, 1024, 784, 128},
    {"anchor_forward_2", false, false, 1024, 1024, 128},      {"anchor_forward_3", false, false, 10, 1024, 128},
    {"anchor_weight_gradient_1", false, true, 1024, 128, 784}, {"anchor_weight_gradient_2", false, true, 1024, 128, 1024},
    {"anchor_weight_gradient_3", false, true, 10, 128, 1024}, {"anchor_input_gradient_2", true, false, 1024, 1024, 128},
    {"anchor_input_gradient_3", true, false, 1024, 10, 128},
};

enum class Engine { dnnl, openblas };

void product(benchmark::State& state, Engine engine, Product p) {
  int const a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
  int const b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
  strata::Matrix a = strata::Matrix::Random(a_rows, a_cols), b = strata::Matrix::Random(b_rows, b_cols),
                 c = strata::Matrix::Zero(p.m, p.n);
  strata::detail::dnnl_on_calling_thread();  // one OpenMP thread, as strata runs every product
  for (auto _ : state) {
    if (engine == Engine::dnnl)
      strata::detail::dnnl_float_gemm(p.trans_a, p.trans_b, 1.0f, strata::view(a), strata::view(b), 0.0f,
                                      strata::view(c), 0, p.n);
    else
      strata::detail::openblas_float_gemm(p.trans_a, p.trans_b, 1.0f, strata::view(a), strata::view(b), 0.0f,
                                          strata::view(c), 0, p.n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  // Google Benchmark multiplies by the iterations of all threads and sums the threads'
  // counters: set on one thread, it is the rate of all of them together.
  if (state.thread_index() == 0)
    state.counters["GFLOP_per_second"] = benchmark::Counter(2.0 * p.m * p.k * p.n * 1e-9,
                                                            benchmark::Counter::kIsIterationInvariantRate);
}

// FloatProduct/<engine>/<label>/<m>x<k>x<n>, on each engine.
void register_on_both(std::string const& label, Product const& p, int max_threads) {
  for (auto [engine, engine_name] : {std::pair{Engine::dnnl, "oneDNN"}, std::pair{Engine::openblas, "OpenBLAS"}}) {
    std::string const name = std::string("FloatProduct/") + engine_name + "/" + label + "/" + std::to_string(p.m) +
                             "x" + std::to_string(p.k) + "x" + std::to_string(p.n);
    benchmark::RegisterBenchmark(name.c_str(), product, engine, p)->UseRealTime()->ThreadRange(1, max_threads);
  }
}

// "16,64,256" -> {16, 64, 256}; exits naming the list where it is not one.
std::vector<int> grid_values(std::string const& list, char const* grid) {
  std::vector<int> out;
  for (std::size_t at = 0; at <= list.size();) {
    std::size_t const end = std::min(list.find(',', at), list.size());
    std::string const item = list.substr(at, end - at);
    std::size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (std::exception const&) {
      used = 0;
    }
    if (used != item.size() || used == 0 || value < 1) {
      std::fprintf(stderr, "STRATA_FLOAT_ENGINES_GRID=%s: '%s' is not a positive size; expected 1 or M:K:N, e.g. "
                           "496,512:512:128\n", grid, item.c_str());
      std::exit(2);
    }
    out.push_back(value);
    at = end + 1;
  }
  return out;
}

bool const registered = [] {
  for (Product const& p : products) register_on_both(p.name, p, 2);
  // A grid of shapes for each arrangement of transposes, one thread: where the faster engine
  // changes. STRATA_FLOAT_ENGINES_GRID=1 runs m, k, n in {16, 64, 256, 1024}; "M:K:N" (three
  // comma-separated lists, e.g. "496,512,528:512:128") runs those values.
  if (char const* grid = std::getenv("STRATA_FLOAT_ENGINES_GRID")) {
    std::string const spec = grid == std::string("1") ? "16,64,256,1024:16,64,256,1024:16,64,256,1024" : grid;
    std::size_t const first = spec.find(':'), second = first == std::string::npos ? first : spec.find(':', first + 1);
    if (second == std::string::npos) {
      std::fprintf(stderr, "STRATA_FLOAT_ENGINES_GRID=%s: expected 1 or M:K:N, e.g. 496,512:512:128\n", grid);
      std::exit(2);
    }
    std::vector<int> const ms = grid_values(spec.substr(0, first), grid),
                           ks = grid_values(spec.substr(first + 1, second - first - 1), grid),
                           ns = grid_values(spec.substr(second + 1), grid);
    for (auto [ta, tb, arrangement] :
         {std::tuple{false, false, "NN"}, std::tuple{false, true, "NT"}, std::tuple{true, false, "TN"}})
      for (int m : ms)
        for (int k : ks)
          for (int n : ns) register_on_both(std::string("grid_") + arrangement, {"grid", ta, tb, m, k, n}, 1);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
