// strata::dnnl: oneDNN runs the CPU backend's products. Its float products are checked
// against a naive loop by test_core and its trainers by test_trainer, both also built against
// it (core.dnnl, trainer.dnnl). Here: the engine's name, bf16 products against exact
// references with bounds from bf16's 8-bit significand, many threads at once, and
// MixedPrecision trained on bf16 products against FullPrecision.
//   test_dnnl         every case but the "bf16:" ones
//   test_dnnl --bf16  only those; exits 77 (CTest: skipped) where the CPU has no AVX512_BF16
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <cmath>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "concurrent_gemm.hpp"
#include "random_matrix.hpp"
#include "strata.hpp"
#ifdef STRATA_TEST_PS
#include "strata/ps.hpp"
#endif

using namespace strata;

namespace {

// bf16's unit roundoff: an 8-bit significand (7 stored bits) rounds to within 2^-8 relative.
constexpr double bf16_unit = 1.0 / 256.0;
constexpr double float_unit = 1.0 / 16777216.0;  // 2^-24

Matrix rounded_to_bf16(Matrix m) {
  round_to<bf16>(m.data(), std::size_t(m.size()));
  return m;
}

// alpha * op(a) * op(b) + beta * c in double, and the sum of |terms| of each element.
struct Exact {
  std::vector<double> value, magnitude;
};
Exact exact_product(Transpose ta, Transpose tb, float alpha, Matrix const& a, Matrix const& b, float beta,
                    Matrix const& c) {
  int const m = int(c.rows()), n = int(c.cols()), k = int(ta == Transpose::no ? a.cols() : a.rows());
  Exact e{std::vector<double>(std::size_t(m) * std::size_t(n)), std::vector<double>(std::size_t(m) * std::size_t(n))};
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0, magnitude = 0;
      for (int p = 0; p < k; ++p) {
        double const t =
            double(ta == Transpose::no ? a(i, p) : a(p, i)) * double(tb == Transpose::no ? b(p, j) : b(j, p));
        s += t;
        magnitude += std::abs(t);
      }
      std::size_t const at = std::size_t(j) * std::size_t(m) + std::size_t(i);
      e.value[at] = double(alpha) * s + double(beta) * double(c(i, j));
      e.magnitude[at] = std::abs(double(alpha)) * magnitude + std::abs(double(beta) * double(c(i, j)));
    }
  return e;
}

// The largest |got - exact| in units of `relative` * magnitude (<= 1 is within the bound).
double worst_in_bound(Matrix const& got, Exact const& exact, double relative) {
  double worst = 0;
  for (std::size_t i = 0; i < exact.value.size(); ++i)
    worst = std::max(worst, std::abs(double(got.data()[i]) - exact.value[i]) / (relative * exact.magnitude[i] + 1e-30));
  return worst;
}

}  // namespace

TEST_CASE("the program runs oneDNN and its first line says what MixedPrecision multiplies") {
  std::string const engine = cpu_gemm_engine();
  CHECK(engine.rfind("oneDNN ", 0) == 0);
  CHECK(engine.find(!bf16_products_available() ? "(float products under MixedPrecision: no AVX512_BF16)"
                    : bf16_kernel_products()     ? "(bf16 products under MixedPrecision, strata's bf16 kernel)"
                                                 : "(bf16 products under MixedPrecision, oneDNN's matmul)") !=
        std::string::npos);
}

TEST_CASE("a bf16-products binding holds for its scope and then restores the one before") {
  CHECK_FALSE(bf16_products_bound);
  {
    Bf16ProductsBinding const on(true);
    CHECK(bf16_products_bound);
    {
      Bf16ProductsBinding const off(false);
      CHECK_FALSE(bf16_products_bound);
    }
    CHECK(bf16_products_bound);
  }
  CHECK_FALSE(bf16_products_bound);
}

TEST_CASE("bf16: products of bf16 inputs with float sums, within bounds from bf16's 8-bit significand") {
  Rng rng(5);
  auto random = [&](int r, int c) { return random_matrix(rng, r, c); };
  comm::ThreadGroup team_threads(2);
  IntraOpTeam const team = team_threads.intra_op_team();
  for (IntraOpTeam const* bound : {static_cast<IntraOpTeam const*>(nullptr), &team})
    for (auto ta : {Transpose::no, Transpose::yes})
      for (auto tb : {Transpose::no, Transpose::yes})
        for (auto [alpha, beta] : {std::array{1.0f, 0.0f}, std::array{0.25f, 1.0f}, std::array{2.0f, 0.5f}})
          for (auto [m, n, k] : {std::array{5, 7, 3}, std::array{10, 128, 1024}, std::array{96, 230, 129},
                                 std::array{40, 33, 1100}}) {  // (the kernel sums 1024 values at a time)
            IntraOpBinding const team_binding(bound);
            Matrix const a = ta == Transpose::no ? random(m, k) : random(k, m);
            Matrix const b = tb == Transpose::no ? random(k, n) : random(n, k);
            Matrix const c0 = random(m, n);
            Matrix got = c0, in_float = c0;
            {
              Bf16ProductsBinding const bf16_binding(true);
              CpuBackend::gemm(ta, tb, alpha, view(a), view(b), beta, view(got));
            }
            CpuBackend::gemm(ta, tb, alpha, view(a), view(b), beta, view(in_float));  // unbound: float products
            // Against the exact product of the bf16-rounded inputs, only float summation
            // errors remain: k terms (and beta * c) summed in float.
            double const summation = double(k + 2) * float_unit;
            Exact const of_rounded = exact_product(ta, tb, alpha, rounded_to_bf16(a), rounded_to_bf16(b), beta, c0);
            CHECK(worst_in_bound(got, of_rounded, summation) <= 1.0);
            // Against the exact product of the float inputs: each product of two rounded
            // inputs is within (2u + u^2) of its exact value, u = 2^-8.
            Exact const of_float = exact_product(ta, tb, alpha, a, b, beta, c0);
            CHECK(worst_in_bound(got, of_float, 2 * bf16_unit + bf16_unit * bf16_unit + summation) <= 1.0);
            CHECK(worst_in_bound(in_float, of_float, summation) <= 1.0);
            // The bf16 path really ran: its result is not the float products' (inputs are not bf16 values).
            if (k > 3) CHECK(worst_in_bound(got, of_float, summation) > 1.0);
          }
}

TEST_CASE("a bf16 copy is found only for floats wholly inside it") {
  std::vector<float> floats(100);
  std::vector<bf16> halves(100);
  Bf16Copy const copy{floats.data(), halves.data(), floats.size()};
  CHECK(copy.find(floats.data(), 100) == halves.data());
  CHECK(copy.find(floats.data() + 40, 60) == halves.data() + 40);
  CHECK(copy.find(floats.data() + 40, 61) == nullptr);  // runs past its end
  std::vector<float> other(10);
  CHECK(copy.find(other.data(), 10) == nullptr);
  CHECK(Bf16Copy{}.find(floats.data(), 1) == nullptr);
  {
    Bf16CopyBinding const bound(copy);
    CHECK(bf16_copy_bound.find(floats.data(), 1) == halves.data());
  }
  CHECK(bf16_copy_bound.size == 0);
}

TEST_CASE("bf16: a product whose input lies in the bound bf16 copy reads the copy, and changes no bit") {
  Rng rng(7);
  Matrix const a = random_matrix(rng, 300, 200), b = random_matrix(rng, 200, 150);
  Matrix weights = a;  // what a trainer binds: the floats rounded to bf16, and their bf16 copy
  round_to<bf16>(weights.data(), std::size_t(weights.size()));
  std::vector<bf16> halves(std::size_t(weights.size()));
  round_to_product_bf16(halves.data(), weights.data(), halves.size());
  auto product = [&](Matrix const& w) {
    Bf16ProductsBinding const bf16(true);
    Matrix c = Matrix::Zero(300, 150);
    CpuBackend::gemm(Transpose::no, Transpose::no, 1.0f, view(w), view(b), 0.0f, view(c));
    return c;
  };
  Matrix const rounding = product(weights);
  Bf16CopyBinding const bound({weights.data(), halves.data(), halves.size()});
  CHECK(product(weights) == rounding);  // read from the copy: the same bits
  // The copy is what is read: a copy of other values shows in the result, a matrix outside it does not.
  for (bf16& h : halves) h = bf16(2.0f * float(h));  // exact: a power of two
  CHECK(product(weights) == 2.0f * rounding);
  Matrix const elsewhere = weights;
  CHECK(product(elsewhere) == rounding);
}

TEST_CASE("bf16: Dense's products give the same bits whether the weights are read from their copies or rounded by the product, split or not") {
  if (!bf16_kernel_products()) {
    char const* const why =
        bf16_gemm::available() ? "skipped: oneDNN's matmul multiplies bf16 on this CPU (AMX)" : "skipped: no AVX512_BF16";
    MESSAGE(why);
    return;
  }
  Rng rng(9);
  comm::ThreadGroup team_threads(2);
  IntraOpTeam const team = team_threads.intra_op_team();
  // Weights as a trainer binds them (rounded, with their bf16 copy and their packed copy) and
  // the activations the products multiply: Dense's forward (y = W x: strata's kernel, which
  // reads the packed copy) and input gradient (dx = W^T dy: oneDNN's matmul, which reads the
  // bf16 copy), with shapes off the kernel's panels of 32 and 8.
  for (auto [out, in, samples] : {std::array{300, 200, 150}, std::array{10, 64, 130}, std::array{64, 33, 8}}) {
    CAPTURE(out);
    Matrix weights = random_matrix(rng, out, in);
    round_to<bf16>(weights.data(), std::size_t(weights.size()));
    std::vector<bf16> halves(std::size_t(weights.size()));
    round_to_product_bf16(halves.data(), weights.data(), halves.size());
    std::vector<bf16> packed(bf16_gemm::packed_a_size(out, in));
    bf16_gemm::pack_a(packed.data(), bf16_gemm::Factor<float>{weights.data(), out, false}, out, in);
    PackedBf16Matrix const matrix{weights.data(), out, in, packed.data()};
    Matrix const x = random_matrix(rng, in, samples), dy = random_matrix(rng, out, samples);
    // dx = 0.5 W^T dy + beta dx, from the same dx every time (rng restarted from `start`).
    auto products = [&](IntraOpTeam const* bound_team, float beta) {
      IntraOpBinding const team_binding(bound_team);
      Bf16ProductsBinding const bf16(true);
      Matrix y = random_matrix(rng, out, samples), dx = random_matrix(rng, in, samples);
      CpuBackend::gemm(Transpose::no, Transpose::no, 1.0f, view(weights), view(x), 0.0f, view(y));
      CpuBackend::gemm(Transpose::yes, Transpose::no, 0.5f, view(weights), view(dy), beta, view(dx));
      return std::array<Matrix, 2>{y, dx};
    };
    Rng const start = rng;
    Bf16Copy const copies{weights.data(), halves.data(), halves.size(), std::span(&matrix, 1)};
    for (float const beta : {1.0f, 0.0f}) {
      rng = start;
      auto const alone = products(nullptr, beta);  // nothing bound, one thread: the products pack the weights
      for (IntraOpTeam const* bound_team : {static_cast<IntraOpTeam const*>(nullptr), &team})
        for (bool const bind : {false, true}) {
          Bf16CopyBinding const bound(bind ? copies : Bf16Copy{});
          rng = start;
          auto const got = products(bound_team, beta);
          CHECK(got[0] == alone[0]);
          CHECK(got[1] == alone[1]);
        }
    }
    // What is read: the packed copy by the forward product, the bf16 copy by the input
    // gradient (scaled by powers of two, which scale the products exactly).
    rng = start;
    auto const alone = products(nullptr, 0.0f);
    for (bf16& h : packed) h = bf16(2.0f * float(h));
    Bf16CopyBinding const bound(copies);
    rng = start;
    auto const doubled_packed = products(&team, 0.0f);
    CHECK(doubled_packed[0] == 2.0f * alone[0]);
    CHECK(doubled_packed[1] == alone[1]);
    for (bf16& h : halves) h = bf16(4.0f * float(h));
    rng = start;
    CHECK(products(&team, 0.0f)[1] == 4.0f * alone[1]);
  }
}

TEST_CASE("bf16: strata's kernel reads a bf16 factor where it lies as it reads it packed, over blocks of its inner dimension") {
  if (!bf16_gemm::available()) {  // (on AMX the kernel is tested though oneDNN multiplies)
    MESSAGE("skipped: no AVX512_BF16");
    return;
  }
  namespace gemm = bf16_gemm;
  Rng rng(11);
  // k = 2100: three blocks of block_pairs; n = 24: whole panels of 8, which a plain factor needs.
  for (auto [m, n, k] : {std::array{70, 24, 2100}, std::array{32, 8, 2}, std::array{5, 16, 64}}) {
    CAPTURE(k);
    Matrix const a = random_matrix(rng, m, k), b = rounded_to_bf16(random_matrix(rng, k, n));
    Matrix const c0 = random_matrix(rng, m, n);
    std::vector<bf16> b_halves(std::size_t(b.size())), packed_a(gemm::packed_a_size(m, k));
    std::vector<bf16> buffer(gemm::packed_b_size(k, n));
    round_to_product_bf16(b_halves.data(), b.data(), b_halves.size());
    gemm::pack_a(packed_a.data(), gemm::Factor<float>{a.data(), m, false}, m, k);
    auto product = [&](gemm::ColumnPairs columns) {
      Matrix c = c0;
      gemm::multiply(packed_a.data(), columns, m, n, k, 0.5f, 2.0f, c.data(), m);
      return c;
    };
    gemm::ColumnPairs const where_it_lies =
        gemm::columns_of(gemm::Factor<bf16>{b_halves.data(), k, false}, k, n, buffer.data());
    CHECK_FALSE(where_it_lies.packed);
    Matrix const plain = product(where_it_lies);
    CHECK(plain == product(gemm::columns_of(gemm::Factor<float>{b.data(), k, false}, k, n, buffer.data())));
    Exact const exact = exact_product(Transpose::no, Transpose::no, 0.5f, rounded_to_bf16(a), b, 2.0f, c0);
    CHECK(worst_in_bound(plain, exact, double(k + 2) * float_unit) <= 1.0);
  }
}

TEST_CASE("bf16: the packed copy refreshed element range by element range is the packing of the whole matrix") {
  if (!bf16_gemm::available()) {  // (on AMX the kernel is tested though oneDNN multiplies)
    MESSAGE("skipped: no AVX512_BF16");
    return;
  }
  Rng rng(10);
  for (auto [rows, cols] : {std::array{1024, 784}, std::array{10, 1024}, std::array{33, 7}, std::array{48, 5}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    Matrix const w = random_matrix(rng, rows, cols);
    std::vector<bf16> whole(bf16_gemm::packed_a_size(rows, cols)), ranges(whole.size());
    bf16_gemm::pack_a(whole.data(), bf16_gemm::Factor<float>{w.data(), rows, false}, rows, cols);
    std::size_t const size = std::size_t(w.size());
    for (std::size_t from = 0, length = 1; from < size; length = length * 3 + 5) {  // ranges of every alignment
      std::size_t const to = std::min(size, from + length);
      bf16_gemm::pack_a_elements(ranges.data(), w.data() + from, rows, cols, from, to);
      from = to;
    }
    CHECK(std::memcmp(whole.data(), ranges.data(), whole.size() * sizeof(bf16)) == 0);
  }
}

TEST_CASE("bf16: pack_a and pack_b lay out every value where the kernel reads it, from each layout and type") {
  if (!bf16_gemm::available()) {  // (on AMX the kernel is tested though oneDNN multiplies)
    MESSAGE("skipped: no AVX512_BF16");
    return;
  }
  namespace gemm = bf16_gemm;
  // The layouts element by element (core/bf16_gemm.hpp): panels of `per_panel` lines (rows of
  // op(a), columns of op(b)); in a panel, for each pair of k, its lines' two values side by
  // side; zero past the last line and past an odd k.
  auto reference = [](auto value, int lines, int k, int per_panel) {
    std::vector<std::uint16_t> out(std::size_t(gemm::panels(lines, per_panel)) * std::size_t(gemm::pairs(k)) * 2 *
                                       std::size_t(per_panel),
                                   0);
    for (int j = 0; j < lines; ++j)
      for (int i = 0; i < k; ++i)
        out[(std::size_t(j / per_panel) * std::size_t(gemm::pairs(k)) + std::size_t(i / 2)) * 2 *
                std::size_t(per_panel) +
            std::size_t(j % per_panel) * 2 + std::size_t(i % 2)] = value(j, i);
    return out;
  };
  Rng rng(11);
  // (lines, k): the MLP's activations and weights, and edges of the 8 x 16 blocks.
  for (auto [lines, k] : {std::array{128, 784}, std::array{16, 1024}, std::array{8, 64}, std::array{13, 33},
                          std::array{9, 31}, std::array{17, 96}, std::array{3, 2}, std::array{70, 40}}) {
    for (bool transposed : {false, true}) {
      CAPTURE(lines);
      CAPTURE(k);
      CAPTURE(transposed);
      // x holds a lines x k matrix M (column-major, or row-major when transposed) with a leading
      // dimension past its extent: op(a) = M for pack_a, op(b) = M^T for pack_b.
      int const ld = (transposed ? k : lines) + 3;
      std::vector<float> floats(std::size_t(ld) * std::size_t(transposed ? lines : k));
      for (float& x : floats) x = rng.uniform() - 0.5f;
      std::vector<bf16> halves(floats.size());
      for (std::size_t i = 0; i < floats.size(); ++i) halves[i] = bf16(floats[i]);
      auto at = [&](int j, int i) {
        return transposed ? std::size_t(j) * std::size_t(ld) + std::size_t(i)
                          : std::size_t(i) * std::size_t(ld) + std::size_t(j);
      };
      auto const value = [&](int j, int i) { return halves[at(j, i)].bits; };
      for (int per_panel : {gemm::panel_rows, gemm::panel_columns}) {
        CAPTURE(per_panel);
        auto const expected = reference(value, lines, k, per_panel);
        std::vector<bf16> from_floats(expected.size()), from_halves(expected.size());
        if (per_panel == gemm::panel_rows) {
          gemm::pack_a(from_floats.data(), gemm::Factor<float>{floats.data(), ld, transposed}, lines, k);
          gemm::pack_a(from_halves.data(), gemm::Factor<bf16>{halves.data(), ld, transposed}, lines, k);
        } else {  // op(b) = M^T: the factor is x with the other orientation
          gemm::pack_b(from_floats.data(), gemm::Factor<float>{floats.data(), ld, !transposed}, k, lines);
          gemm::pack_b(from_halves.data(), gemm::Factor<bf16>{halves.data(), ld, !transposed}, k, lines);
        }
        CHECK(std::memcmp(from_floats.data(), expected.data(), expected.size() * 2) == 0);
        CHECK(std::memcmp(from_halves.data(), expected.data(), expected.size() * 2) == 0);
      }
    }
  }
}

TEST_CASE("bf16: the one-pass refresh of the rounded weights and their bf16 copy gives the bits of the two passes") {
  // Random values across the exponent range, ties, subnormals, zeros, infinities, NaNs, and
  // a length that leaves a tail after the 32-wide blocks.
  Rng rng(8);
  std::vector<float> in(1000 + 7);
  for (std::size_t i = 0; i < in.size(); ++i)
    in[i] = std::ldexp(rng.uniform() - 0.5f, int(rng() % 80) - 40);
  float const special[] = {0.0f, -0.0f, 1e-40f, -1e-40f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::nanf(""), -std::nanf(""),
                           std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u),  // ties to even
                           std::bit_cast<float>(0x7f7fffffu), std::bit_cast<float>(0x7f800001u)};
  for (std::size_t k = 0; k < std::size(special); ++k) {
    in[k * 13] = special[k];
    in[in.size() - 1 - k / 2] = special[k];  // some in the tail
  }
  std::vector<float> two_pass = in;
  std::vector<bf16> two_pass_halves(in.size());
  round_to<bf16>(two_pass.data(), two_pass.size());
  round_to_product_bf16(two_pass_halves.data(), two_pass.data(), two_pass.size());
  // The rounded floats 64-byte aligned (written with streaming stores) and not.
  for (std::size_t offset : {std::size_t(0), std::size_t(1)}) {
    CAPTURE(offset);
    AlignedBuffer rounded(in.size() + 1);
    std::vector<bf16> halves(in.size());
    round_with_bf16_copy(rounded.data() + offset, halves.data(), in.data(), in.size());
    CHECK(std::memcmp(rounded.data() + offset, two_pass.data(), in.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(halves.data(), two_pass_halves.data(), in.size() * sizeof(bf16)) == 0);
  }
  // Without the rounded floats (weights only products read): the same bf16 copy.
  std::vector<bf16> halves_only(in.size());
  round_with_bf16_copy(nullptr, halves_only.data(), in.data(), in.size());
  CHECK(std::memcmp(halves_only.data(), two_pass_halves.data(), in.size() * sizeof(bf16)) == 0);
}

// Dense whose kernel does not say that only products read it: the trainer keeps all of its
// rounded float copy, as before that was known.
template <int In, int Out>
struct KeptDense : Dense<In, Out> {
  static std::vector<nn::ParameterTensor> parameter_tensors(int width) {
    auto tensors = Dense<In, Out>::parameter_tensors(width);
    for (auto& t : tensors) t.read_by_products_only = false;
    return tensors;
  }
};

TEST_CASE("bf16: the rounded float copy of a kernel only products read is not written, and no bit of training changes") {
  using Mlp = Sequential<Dense<784, 64>, Relu, Dense<64, 10>>;
  using KeptMlp = Sequential<KeptDense<784, 64>, Relu, KeptDense<64, 10>>;
  // What the forward passes read: the biases rounded, the kernels' floats never written
  // (zero), their bf16 copy complete; but where strata's kernel reads the packed copy, the
  // first kernel's bf16 copy (read only by an input gradient no one asks for) is NaN.
  Mlp probe(5);
  auto const tensors = Mlp::parameter_tensors();
  train::ReplicaWeights<Cpu, bf16> weights(probe.parameters(), 2, tensors);
  auto const bound = weights.bind_copy(0);
  for (auto const& t : tensors) {
    CAPTURE(t.name);
    bool const packed_only = bf16_kernel_products() && t.name == "dense_0/kernel";
    std::size_t nonzero = 0, rounded = 0, copied = 0, not_numbers = 0;
    for (std::size_t i = t.offset; i < t.offset + nn::element_count(t.shape); ++i) {
      float const host = probe.parameters()[i];
      nonzero += weights(0)[i] != 0.0f;
      rounded += weights(0)[i] == float(bf16(host));
      bf16 const copy = *bf16_copy_bound.find(weights(0) + i, 1);
      copied += copy.bits == bf16(float(bf16(host))).bits;
      not_numbers += std::isnan(float(copy));
    }
    std::size_t const n = nn::element_count(t.shape);
    CHECK(t.read_by_products_only == t.name.ends_with("kernel"));
    if (t.read_by_products_only) CHECK(nonzero == 0);
    else CHECK(rounded == n);
    CHECK(copied == (packed_only ? 0 : n));
    CHECK(not_numbers == (packed_only ? n : 0));
  }
  // Trained with and without the float copy of the kernels: the same weights, bit for bit.
  auto const train = data::fashion_mnist(data::Split::train).take(1024);
  auto run = [&]<class Model>(Model model) {
    Trainer<Mirrored<2>, MixedPrecision> trainer;
    trainer.fit(model, Adam{.lr = 1e-3f}, SoftmaxCrossEntropy{}, train, {.epochs = 2, .batch_size = 128, .seed = 4});
    return std::vector<float>(model.parameters().begin(), model.parameters().end());
  };
  CHECK(run(Mlp(5)) == run(KeptMlp(5)));
}

TEST_CASE("bf16: the float copy of the weights holds in memory only the pages of the tensors it keeps") {
#if defined(__linux__)
  // A first kernel of 3.2 MB with its bias after it: in huge pages that bias's write would
  // bring in the 2 MiB around it; in small pages only the bias's own 4 KiB pages come in.
  using Mlp = Sequential<Dense<784, 1024>, Relu, Dense<1024, 10>>;
  Mlp model(5);
  auto const tensors = Mlp::parameter_tensors();
  train::ReplicaWeights<Cpu, bf16> weights(model.parameters(), 2, tensors);
  std::size_t const bytes = model.parameters().size() * sizeof(float);
  REQUIRE(detail::mapped(bytes));
  std::vector<unsigned char> in_memory((bytes + 4095) / 4096);
  REQUIRE(::mincore(const_cast<float*>(weights(0)), in_memory.size() * 4096, in_memory.data()) == 0);
  std::size_t const resident = std::size_t(std::count_if(in_memory.begin(), in_memory.end(), [](unsigned char c) { return (c & 1) != 0; }));
  // dense_0/bias (4 KiB, at most 2 pages), dense_1/bias (40 bytes, at most 2 pages).
  CHECK(resident >= 2);
  CHECK(resident <= 4);
  for (auto const& t : tensors)
    if (!t.read_by_products_only)
      CHECK(weights(0)[t.offset] == float(bf16(model.parameters()[t.offset])));  // the biases, rounded
#else
  MESSAGE("skipped: not Linux");
#endif
}

TEST_CASE("bf16: a first layer's kernel kept only packed, alone or inside a residual block, changes no bit of training") {
  // The NaN in its bf16 copy would reach the weights if any product read it.
  using Block = Sequential<Dense<784, 32>, Relu, Dense<32, 784>>;
  using KeptBlock = Sequential<KeptDense<784, 32>, Relu, KeptDense<32, 784>>;
  using Model = Sequential<Residual<Block>, Dense<784, 10>>;
  using KeptModel = Sequential<Residual<KeptBlock>, KeptDense<784, 10>>;
  auto const train = data::fashion_mnist(data::Split::train).take(512);
  auto run = [&]<class M>(M model) {
    Trainer<OneDevice, MixedPrecision> trainer;
    trainer.fit(model, Sgd{.lr = 0.05f, .momentum = 0.9f}, SoftmaxCrossEntropy{}, train,
                {.epochs = 2, .batch_size = 128, .seed = 4});
    return std::vector<float>(model.parameters().begin(), model.parameters().end());
  };
  auto const weights = run(Model(5));
  CHECK(std::none_of(weights.begin(), weights.end(), [](float w) { return std::isnan(w); }));
  CHECK(weights == run(KeptModel(5)));
}

TEST_CASE("bf16: refreshing the bf16 copy chunk by chunk in the fused update gives the bits of refreshing after it") {
  using Mlp = Sequential<Dense<784, 64>, Relu, Dense<64, 10>>;
  auto const train = data::fashion_mnist(data::Split::train).take(1024);
  auto run = [&](float clip) {  // a clipping norm needs the whole gradient first: the update refreshes after it
    Mlp model(5);
    Trainer<Mirrored<2>, MixedPrecision> trainer;
    trainer.fit(model, Adam{.lr = 1e-3f}, SoftmaxCrossEntropy{}, train,
                {.epochs = 2, .batch_size = 128, .seed = 4, .clip_global_norm = clip});
    return std::vector<float>(model.parameters().begin(), model.parameters().end());
  };
  CHECK(run(0.0f) == run(1e30f));  // a norm never reached: the same arithmetic, refreshed at other times
}

TEST_CASE("bf16: a BERT's passes read the same numbers whether or not its kernels keep their float copy") {
  // Attention's kernels say only products read them; its embeddings, norms and biases do
  // not. Forward and backward over the lean copy (kernels' floats never written) and over
  // one that keeps every float give the same outputs and gradients, bit for bit.
  using TinyBert = Sequential<Bert<2, 8, 2, 12, 23, 6>, BertPooler<8, 6>, Dense<8, 3>>;
  TinyBert model(5);
  auto const tensors = TinyBert::parameter_tensors();
  CHECK(std::any_of(tensors.begin(), tensors.end(), [](nn::ParameterTensor const& t) {
    return t.read_by_products_only && t.name.find("attention") != std::string::npos;
  }));
  Rng rng(6);
  for (float& w : model.parameters()) w += 0.1f * (rng.uniform() - 0.5f);  // no zero biases: every tensor is seen
  int const n = 8;
  Matrix ids = Matrix::Zero(6, n), classes(1, n);
  for (int s = 0; s < n; ++s) {
    int const length = 2 + int(rng() % 5);
    for (int t = 0; t < length; ++t) ids(t, s) = float(t == 0 ? 2 : (t + 1 == length ? 3 : 5 + int(rng() % 18)));
    classes(0, s) = float(s % 3);
  }
  auto pass = [&](train::ReplicaWeights<Cpu, bf16> const& weights) {
    auto const bound = weights.bind_copy(0);
    TinyBert::Workspace<CpuBackend, bf16> ws(n);
    model.forward(ws, weights(0), view(ids), {.training = true, .seed = 11});
    SoftmaxCrossEntropy{}.forward_backward<CpuBackend>(ws.output(), view(classes), ws.output_gradient(), 1.0f);
    std::vector<float> out(ws.output().data, ws.output().data + ws.output().size());
    model.backward(ws, weights(0), model.gradients().data(), view(ids), false);
    out.insert(out.end(), model.gradients().begin(), model.gradients().end());
    return out;
  };
  train::ReplicaWeights<Cpu, bf16> const lean(model.parameters(), 1, tensors), kept(model.parameters(), 1);
  CHECK(pass(lean) == pass(kept));
}

TEST_CASE("replica threads can run bf16 and float products at once: each result equals the same call made alone") {
  auto const bind = [](int t) { return Bf16ProductsBinding(t % 2 == 0); };  // bf16 on even threads, float on odd
  for (int mismatches : concurrent_gemm_mismatches(4, 100, bind)) CHECK(mismatches == 0);
}

TEST_CASE("bf16: MixedPrecision on bf16 products learns what FullPrecision learns, the same every run") {
  using Mlp = Sequential<Dense<784, 128>, Relu, Dense<128, 10>>;
  auto const train = data::fashion_mnist(data::Split::train).take(4096);
  auto const test = data::fashion_mnist(data::Split::test).take(2000);
  auto run = [&]<class Precision>(Precision) {
    Mlp model(3);
    Trainer<Mirrored<2>, Precision> trainer;
    auto const history = trainer.fit(model, Adam{.lr = 1e-3f}, SoftmaxCrossEntropy{}, train,
                                     {.epochs = 2, .batch_size = 128, .seed = 9});
    auto const result = trainer.evaluate(model, SoftmaxCrossEntropy{}, test);
    return std::tuple{history["loss"].back(), *result.accuracy,
                      std::vector<float>(model.parameters().begin(), model.parameters().end())};
  };
  auto const [mixed_loss, mixed_accuracy, mixed_weights] = run(MixedPrecision{});
  auto const [full_loss, full_accuracy, full_weights] = run(FullPrecision{});
  MESSAGE("loss ", mixed_loss, " vs ", full_loss, "; accuracy ", mixed_accuracy, " vs ", full_accuracy);
  CHECK(mixed_weights != full_weights);
  CHECK(std::abs(mixed_loss - full_loss) < 0.03 * full_loss);
  CHECK(std::abs(mixed_accuracy - full_accuracy) < 0.02);
  CHECK(std::get<2>(run(MixedPrecision{})) == mixed_weights);
}

#ifdef STRATA_TEST_PS
// A worker binds the bf16 and packed copies of the weights it pulled, as a replica binds its
// update's: under S = 0 the cluster trains what OneDevice trains on bf16 products, bit for bit.
TEST_CASE("bf16: ParameterServer workers on bf16 products train what OneDevice trains in MixedPrecision (S = 0)") {
  using Mlp = Sequential<Dense<784, 128>, Relu, Dense<128, 10>>;
  auto const train = data::fashion_mnist(data::Split::train).take(1024);
  FitOptions const options{.epochs = 2, .batch_size = 64, .seed = 9};
  Mlp reference(3), trained(3);
  Trainer<OneDevice, MixedPrecision>{}.fit(reference, Adam{.lr = 1e-3f}, SoftmaxCrossEntropy{}, train, options);
  Trainer<ParameterServer<2, 2>, MixedPrecision>({.partition = {.min_shard_bytes = 4096}})
      .fit(trained, Adam{.lr = 1e-3f}, SoftmaxCrossEntropy{}, train, options);
  auto const a = reference.parameters(), b = trained.parameters();
  CHECK(std::vector<float>(b.begin(), b.end()) == std::vector<float>(a.begin(), a.end()));
}
#endif

#if defined(STRATA_DNNL_OPENBLAS)
TEST_CASE("beside oneDNN, OpenBLAS multiplies the float products oneDNN's AVX2 kernels run slowly, and no others") {
  // The rule: a itself (not transposed), rows a multiple of 512, at most 256 output columns
  // (512 where a has 512 rows), inner >= 64.
  CHECK(detail::dnnl_avx2_slow_float_product(false, 1024, 784, 128));  // the anchor MLP's first forward
  CHECK(detail::dnnl_avx2_slow_float_product(false, 512, 64, 256));
  CHECK(detail::dnnl_avx2_slow_float_product(false, 512, 1024, 512));
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 512, 1024, 513));
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 1024, 1024, 384));
  CHECK(detail::dnnl_avx2_slow_float_product(false, 1536, 512, 1));
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(true, 1024, 1024, 128));  // an input gradient
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 1000, 784, 128));  // 1,000 rows run at full speed
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 256, 784, 64));    // the flagship's first forward
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 1024, 128, 257));  // wider than 256 columns
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 1024, 63, 128));   // a tiny inner dimension
  CHECK_FALSE(detail::dnnl_avx2_slow_float_product(false, 0, 64, 64));

  // The environment's switch: unset or 1 on, 0 off, anything else an error naming it.
  CHECK(detail::openblas_beside_dnnl_wanted(nullptr));
  CHECK(detail::openblas_beside_dnnl_wanted("1"));
  CHECK_FALSE(detail::openblas_beside_dnnl_wanted("0"));
  CHECK_THROWS_WITH_AS(detail::openblas_beside_dnnl_wanted("yes"),
                       doctest::Contains("STRATA_DNNL_OPENBLAS=yes: expected 0"), ConfigError);

  // This process (run twice by ctest: as it is, and with STRATA_DNNL_OPENBLAS=0): the engine
  // line names OpenBLAS's share exactly where it takes one.
  bool const beside = detail::openblas_beside_dnnl();
  bool const off = !detail::openblas_beside_dnnl_wanted(std::getenv("STRATA_DNNL_OPENBLAS"));
  if (off) CHECK_FALSE(beside);
  std::string const engine = cpu_gemm_engine();
  CHECK((engine.find("; " + openblas_engine() + ", for the float products of 512k-row weights") != std::string::npos) ==
        beside);
  CHECK((engine.find("OpenBLAS beside it turned off (STRATA_DNNL_OPENBLAS=0)") != std::string::npos) == off);
  CHECK((engine.find("OpenBLAS linked, unused on this CPU") != std::string::npos) == (!beside && !off));
  MESSAGE("engine: " << engine);

  // CpuBackend::gemm, whole and split over an intra-op team of 2, within a float bound of an
  // exact sum, and bit for bit the engine the rule names for each part.
  Rng rng(17);
  comm::ThreadGroup team_threads(2);
  IntraOpTeam const team = team_threads.intra_op_team();
  int routed = 0;
  for (IntraOpTeam const* bound : {static_cast<IntraOpTeam const*>(nullptr), &team})
    for (auto ta : {Transpose::no, Transpose::yes})
      for (auto tb : {Transpose::no, Transpose::yes})
        for (float beta : {0.0f, 0.5f})
          for (auto [m, n, k] : {std::array{1024, 96, 200}, std::array{512, 512, 64}, std::array{512, 384, 100},
                                 std::array{1000, 96, 200}, std::array{1024, 96, 40}}) {
            IntraOpBinding const binding(bound);
            Matrix const a = ta == Transpose::no ? random_matrix(rng, m, k) : random_matrix(rng, k, m);
            Matrix const b = tb == Transpose::no ? random_matrix(rng, k, n) : random_matrix(rng, n, k);
            Matrix const c = random_matrix(rng, m, n);
            Matrix got = c, direct = c;
            CpuBackend::gemm(ta, tb, 2.0f, view(a), view(b), beta, view(got));
            int const parts = CpuBackend::split_parts(m, n, k);
            bool const trans_a = ta == Transpose::yes, trans_b = tb == Transpose::yes;
            for (int p = 0; p < parts; ++p) {
              auto const [first, count] = split_columns(n, parts, p);
              if (beside && detail::dnnl_avx2_slow_float_product(trans_a, int(a.rows()), k, count)) {
                ++routed;
                detail::openblas_float_gemm(trans_a, trans_b, 2.0f, view(a), view(b), beta, view(direct), first, count);
              } else {
                detail::dnnl_float_gemm(trans_a, trans_b, 2.0f, view(a), view(b), beta, view(direct), first, count);
              }
            }
            CHECK(got == direct);
            CHECK(worst_in_bound(got, exact_product(ta, tb, 2.0f, a, b, beta, c), double(k + 2) * float_unit) <= 1.0);
          }
  // Where OpenBLAS takes its share, the rule sent it parts of the 1024- and 512-row products.
  CHECK((routed > 0) == beside);
}
#endif

int main(int argc, char** argv) {
  bool bf16 = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--bf16") == 0) bf16 = true;
    else args.push_back(argv[i]);
  }
  std::printf("engine: %s\n", cpu_gemm_engine().c_str());
  doctest::Context context(int(args.size()), args.data());
  if (bf16) {
    if (!bf16_products_available()) {
      std::printf("skipped: no AVX512_BF16 (MixedPrecision multiplies floats on this CPU)\n");
      return 77;
    }
    context.addFilter("test-case", "bf16:*");
  } else {
    context.addFilter("test-case-exclude", "bf16:*");
  }
  return context.run();
}
