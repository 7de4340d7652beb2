// The Cuda backend. `test_cuda` runs what needs no GPU: NVRTC compiles every kernel for
// sm_75, sm_80 and sm_90, the disk cache, compile errors, and the errors a machine without a
// GPU gives. `test_cuda --gpu` runs every backend function, layer, optimizer and strategy on
// the GPU against the CPU backend, and exits 77 (CTest: skipped) when there is no GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gpu_main.hpp"
#include "marker_sequences.hpp"
#include "random_matrix.hpp"
#include "strata.hpp"
#include "strata/cuda.hpp"
#include "temp_dir.hpp"
#include "user_optimizer.hpp"
#include "weights_after_each_epoch.hpp"

using namespace strata;

namespace {

bool contains(std::vector<char> const& bytes, std::string const& text) {
  return std::search(bytes.begin(), bytes.end(), text.begin(), text.end()) != bytes.end();
}

// ---- Host <-> device helpers for the GPU cases ----
struct DeviceMatrixCopy {
  cuda::DeviceBuffer<float> buffer;
  int rows = 0, cols = 0;
  explicit DeviceMatrixCopy(Matrix const& m) : buffer(std::size_t(std::max<Eigen::Index>(1, m.size())), 0), rows(int(m.rows())), cols(int(m.cols())) {
    cuda::check(cudaMemcpy(buffer.data(), m.data(), std::size_t(m.size()) * sizeof(float), cudaMemcpyHostToDevice), "copy");
  }
  MatrixView view() { return {buffer.data(), rows, cols}; }
  Matrix host() const {
    Matrix m(rows, cols);
    cuda::check(cudaMemcpy(m.data(), buffer.data(), std::size_t(m.size()) * sizeof(float), cudaMemcpyDeviceToHost), "copy");
    return m;
  }
};

Matrix features_of(data::Dataset const& d) { return strata::detail::eigen(d.features()); }

double max_relative_error(Matrix const& got, Matrix const& want) {
  double const scale = std::max(1e-6, double(want.cwiseAbs().maxCoeff()));
  return double((got - want).cwiseAbs().maxCoeff()) / scale;
}

Matrix labels_row(std::vector<float> const& values) {
  Matrix m(1, Eigen::Index(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) m(0, Eigen::Index(i)) = values[i];
  return m;
}

}  // namespace

// ---------------------------------------------------------------- no GPU needed

TEST_CASE("NVRTC compiles every kernel for sm_75, sm_80 and sm_90 without a GPU") {
  auto const archs = cuda::nvrtc_architectures();
  for (int arch : {75, 80, 90}) {
    CAPTURE(arch);
    REQUIRE(std::find(archs.begin(), archs.end(), arch) != archs.end());
    auto const compiled = cuda::compile_kernels(arch, {{}, false});
    CHECK_FALSE(compiled.from_cache);
    REQUIRE(compiled.cubin.size() > 4);
    CHECK(std::memcmp(compiled.cubin.data(), "\x7f" "ELF", 4) == 0);
    for (char const* name : cuda::kernel_names) {
      CAPTURE(name);
      CHECK(contains(compiled.cubin, name));
    }
  }
}

TEST_CASE("NVRTC compiles the kernel modules of layers and losses for sm_75, sm_80 and sm_90") {
  for (cuda::KernelModule const* module : {&nn::activation_kernels, &nn::dropout_kernels, &nn::loss_kernels,
                                           &nn::layer_norm_kernels, &nn::residual_kernels, &nn::embedding_kernels,
                                           &nn::attention_kernels}) {
    for (int arch : {75, 80, 90}) {
      CAPTURE(arch);
      CAPTURE(module->name);
      auto const compiled = cuda::compile_kernels(arch, {{}, false}, module->source, module->name);
      REQUIRE(compiled.cubin.size() > 4);
      CHECK(std::memcmp(compiled.cubin.data(), "\x7f" "ELF", 4) == 0);
      for (char const* name : module->kernels) {
        CAPTURE(name);
        CHECK(contains(compiled.cubin, name));
      }
    }
  }
  // A module that does not compile names itself.
  std::string_view const broken = "extern \"C\" __global__ void f() { undeclared(); }";
  try {
    (void)cuda::compile_kernels(90, {{}, false}, broken, "MyLayer");
    FAIL("compiled");
  } catch (DeviceError const& e) {
    CHECK(std::string(e.what()).find("NVRTC: compiling the MyLayer kernels for sm_90 failed") != std::string::npos);
  }
}

TEST_CASE("NVRTC compiles the optimizers' element rules (strata's, a scheduled one, a user's) for sm_75, sm_80 and sm_90") {
  // Each module holds the rule's own text after the device prelude, and one kernel per slot
  // count its call operator takes (Sgd: 0 and 1; Adam: 2; Lamb: the two layer-wise phases).
  auto check_module = [](optim::detail::RuleKernels const& kernels, std::size_t count) {
    cuda::KernelModule const& module = kernels.module();
    CAPTURE(module.name);
    CHECK(module.kernels.size() == count);
    for (int arch : {75, 80, 90}) {
      CAPTURE(arch);
      auto const compiled = cuda::compile_kernels(arch, {{}, false}, module.source, module.name);
      REQUIRE(compiled.cubin.size() > 4);
      for (char const* name : module.kernels) {
        CAPTURE(name);
        CHECK(contains(compiled.cubin, name));
      }
    }
  };
  check_module(optim::rule_kernels<optim::SgdRule>(), 2);
  check_module(optim::rule_kernels<optim::AdamRule>(), 1);
  check_module(optim::rule_kernels<optim::LambRule>(), 2);
  check_module(optim::rule_kernels<user::RmsRule>(), 1);
  CHECK(optim::rule_kernels<optim::SgdRule>().for_slots(1) == 1);
  static_assert(std::is_same_v<decltype(optim::Scheduled<Adam, CosineDecay>{}.rule(1)), optim::AdamRule>);
  CHECK(&optim::rule_kernels<optim::AdamRule>() == &optim::rule_kernels<optim::AdamRule>());  // made once
}

TEST_CASE("the kernel cache returns the same binary, and a damaged file is compiled again and replaced") {
  TempDir dir;
  cuda::KernelCacheOptions const cache{dir.path, true};
  auto const first = cuda::compile_kernels(90, cache);
  CHECK_FALSE(first.from_cache);
  REQUIRE(std::filesystem::exists(first.cache_file));
  auto const second = cuda::compile_kernels(90, cache);
  CHECK(second.from_cache);
  CHECK(second.cubin == first.cubin);
  CHECK(second.cache_file == first.cache_file);
  { std::ofstream(first.cache_file, std::ios::binary | std::ios::trunc) << "not a cubin"; }
  auto const third = cuda::compile_kernels(90, cache);
  CHECK_FALSE(third.from_cache);
  CHECK(third.cubin == first.cubin);
  CHECK(cuda::compile_kernels(90, cache).from_cache);  // replaced
  // A different architecture or source is a different file.
  CHECK(cuda::compile_kernels(80, cache).cache_file != first.cache_file);
}

TEST_CASE("a kernel that does not compile is a DeviceError carrying NVRTC's log") {
  std::string const broken = std::string(cuda::kernel_source) + "\nextern \"C\" __global__ void oops(float* x) { x[0] = y; }\n";
  try {
    (void)cuda::compile_kernels(90, {{}, false}, broken);
    FAIL("compiled");
  } catch (DeviceError const& e) {
    std::string const what = e.what();
    CHECK(what.find("NVRTC: compiling strata's kernels for sm_90 failed") != std::string::npos);
    CHECK(what.find("identifier \"y\" is undefined") != std::string::npos);
  }
}

TEST_CASE("without that GPU, the Cuda backend and Trainer<Cuda> say so and leave the model alone") {
  int const devices = cuda::device_count();
  int const missing = devices == 0 ? 0 : devices;  // no GPU: device 0; else one past the last
  CHECK_THROWS_WITH_AS(cuda::Context{missing}, doctest::Contains(devices == 0 ? "no CUDA device is visible" : "does not exist"),
                       DeviceError);
  if (devices == 0) {
    Sequential<Dense<4, 3>> model(1);
    std::vector<float> const before(model.parameters().begin(), model.parameters().end());
    data::Dataset const data(Matrix::Ones(4, 8), std::vector<std::int32_t>{0, 1, 2, 0, 1, 2, 0, 1});
    Trainer<Mirrored<2>, Cuda> trainer;
    CHECK_THROWS_WITH_AS(trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 4}),
                         doctest::Contains("use strata::Cpu"), DeviceError);
    Trainer<CentralStorage<2>, Cuda> central;
    CHECK_THROWS_WITH_AS(central.fit(model, Adam{}, SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 4}),
                         doctest::Contains("use strata::Cpu"), DeviceError);
    CHECK(std::equal(before.begin(), before.end(), model.parameters().begin()));
  }
  CHECK_THROWS_WITH_AS(cuda::current_context(), doctest::Contains("ContextBinding"), DeviceError);
}

// ---------------------------------------------------------------- GPU

TEST_CASE("gpu: GEMM in every transpose and precision against the CPU backend") {
  cuda::Context context(0);
  cuda::ContextBinding const bind(context);
  Rng rng(3);
  struct Case {
    cuda::GemmPrecision precision;
    double tolerance;
  };
  // fp32 differs from Eigen only in summation order; TF32 keeps 10 mantissa bits, bf16 7, fp16 10.
  for (Case const c : {Case{cuda::GemmPrecision::fp32, 1e-5}, Case{cuda::GemmPrecision::tf32, 5e-3},
                       Case{cuda::GemmPrecision::bf16, 2e-2}, Case{cuda::GemmPrecision::fp16, 5e-3}}) {
    context.set_precision(c.precision);
    context.reserve(1 << 16, 1);
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        CAPTURE(cuda::gemm_precision_name(c.precision));
        CAPTURE(ta);
        CAPTURE(tb);
        int const m = 37, n = 29, k = 53;
        Matrix a = ta ? random_matrix(rng, k, m) : random_matrix(rng, m, k);
        Matrix b = tb ? random_matrix(rng, n, k) : random_matrix(rng, k, n);
        Matrix want = random_matrix(rng, m, n);
        DeviceMatrixCopy da(a), db(b), dc(want);
        auto const op = [](int t) { return t ? Transpose::yes : Transpose::no; };
        CpuBackend::gemm(op(ta), op(tb), 0.5f, view(a), view(b), 0.25f, view(want));
        CudaBackend::gemm(op(ta), op(tb), 0.5f, da.view(), db.view(), 0.25f, dc.view());
        CHECK(max_relative_error(dc.host(), want) < c.tolerance);
      }
  }
}

TEST_CASE("gpu: every element-wise function, loss and metric against the CPU backend") {
  cuda::Context context(0);
  cuda::ContextBinding const bind(context);
  Rng rng(5);
  int const rows = 10, cols = 300;
  Matrix const x = random_matrix(rng, rows, cols) * 6.0f;
  Matrix const dy = random_matrix(rng, rows, cols);
  Matrix bias = random_matrix(rng, rows, 1);
  DeviceMatrixCopy dx_in(x), ddy(dy), dbias(bias);
  auto run = [&](auto cpu, auto gpu, double tolerance) {
    Matrix want(rows, cols);
    DeviceMatrixCopy got(want);
    cpu(want);
    gpu(got.view());
    context.synchronize();
    CHECK(max_relative_error(got.host(), want) <= tolerance);
  };
  SUBCASE("activations") {
    run([&](Matrix& y) { nn::ActivationMath<CpuBackend>::relu(view(x), view(y)); }, [&](MatrixView y) { nn::ActivationMath<CudaBackend>::relu(dx_in.view(), y); }, 0);
    run([&](Matrix& y) { nn::ActivationMath<CpuBackend>::relu_backward(view(x), view(dy), view(y)); },
        [&](MatrixView y) { nn::ActivationMath<CudaBackend>::relu_backward(dx_in.view(), ddy.view(), y); }, 0);
    run([&](Matrix& y) { nn::ActivationMath<CpuBackend>::tanh(view(x), view(y)); }, [&](MatrixView y) { nn::ActivationMath<CudaBackend>::tanh(dx_in.view(), y); }, 1e-6);
    run([&](Matrix& y) { nn::ActivationMath<CpuBackend>::tanh_backward(view(x), view(dy), view(y)); },
        [&](MatrixView y) { nn::ActivationMath<CudaBackend>::tanh_backward(dx_in.view(), ddy.view(), y); }, 1e-6);
    run([&](Matrix& y) { nn::ActivationMath<CpuBackend>::gelu(view(x), view(y)); }, [&](MatrixView y) { nn::ActivationMath<CudaBackend>::gelu(dx_in.view(), y); }, 1e-6);
    run([&](Matrix& y) { nn::ActivationMath<CpuBackend>::gelu_backward(view(x), view(dy), view(y)); },
        [&](MatrixView y) { nn::ActivationMath<CudaBackend>::gelu_backward(dx_in.view(), ddy.view(), y); }, 1e-6);
    run([&](Matrix& y) { nn::DropoutMath<CpuBackend>::multiply(view(x), view(dy), view(y)); },
        [&](MatrixView y) { nn::DropoutMath<CudaBackend>::multiply(dx_in.view(), ddy.view(), y); }, 0);
    run([&](Matrix& y) { y = x; CpuBackend::add_bias(view(y), bias.data()); },
        [&](MatrixView y) { CudaBackend::copy(dx_in.view(), y); CudaBackend::add_bias(y, dbias.buffer.data()); }, 0);
  }
  SUBCASE("dropout draws the CPU's masks exactly") {
    Matrix mask(rows, cols), y(rows, cols);
    DeviceMatrixCopy dmask(mask), dyo(y);
    nn::DropoutMath<CpuBackend>::dropout(view(x), view(y), view(mask), 0.3f, 1234, 77);
    nn::DropoutMath<CudaBackend>::dropout(dx_in.view(), dyo.view(), dmask.view(), 0.3f, 1234, 77);
    CHECK(dmask.host() == mask);
    CHECK(dyo.host() == y);
  }
  SUBCASE("row sums, with and without beta") {
    std::vector<float> want(rows, 1.0f);
    cuda::DeviceBuffer<float> got(rows, 0);
    cuda::check(cudaMemcpy(got.data(), want.data(), rows * sizeof(float), cudaMemcpyHostToDevice), "copy");
    CpuBackend::row_sums(view(x), 0.5f, want.data());
    CudaBackend::row_sums(dx_in.view(), 0.5f, got.data());
    std::vector<float> host(rows);
    cuda::check(cudaMemcpy(host.data(), got.data(), rows * sizeof(float), cudaMemcpyDeviceToHost), "copy");
    for (int i = 0; i < rows; ++i) CHECK(host[std::size_t(i)] == doctest::Approx(want[std::size_t(i)]).epsilon(1e-4));
  }
  SUBCASE("softmax cross-entropy, accuracy, mean squared error; a bad label named as on the CPU") {
    std::vector<float> label_values;
    for (int j = 0; j < cols; ++j) label_values.push_back(float((j * 7) % rows));
    Matrix const labels = labels_row(label_values);
    DeviceMatrixCopy dlabels(labels);
    Matrix want(rows, cols);
    DeviceMatrixCopy got(want);
    double const loss = nn::LossMath<CpuBackend>::softmax_cross_entropy(view(x), view(labels), view(want), 0.5f);
    double const gpu_loss = nn::LossMath<CudaBackend>::softmax_cross_entropy(dx_in.view(), dlabels.view(), got.view(), 0.5f);
    CHECK(gpu_loss == doctest::Approx(loss).epsilon(1e-6));
    CHECK(max_relative_error(got.host(), want) < 1e-6);
    CHECK(nn::AccuracyMath<CudaBackend>::count_correct(dx_in.view(), dlabels.view()) == nn::AccuracyMath<CpuBackend>::count_correct(view(x), view(labels)));
    double const mse = nn::LossMath<CpuBackend>::mean_squared_error(view(x), view(dy), view(want), 2.0f);
    CHECK(nn::LossMath<CudaBackend>::mean_squared_error(dx_in.view(), ddy.view(), got.view(), 2.0f) == doctest::Approx(mse).epsilon(1e-5));
    CHECK(max_relative_error(got.host(), want) < 1e-6);
    label_values[17] = 10.0f;
    label_values[40] = 2.5f;
    DeviceMatrixCopy bad(labels_row(label_values));
    CHECK_THROWS_WITH_AS(nn::LossMath<CudaBackend>::softmax_cross_entropy(dx_in.view(), bad.view(), got.view(), 1.0f),
                         "SoftmaxCrossEntropy: label 10 of sample 17 in this batch is not a class index in [0, 10)",
                         DataError);
  }
  SUBCASE("rounding to bf16 and fp16 gives the CPU's bits") {
    Matrix wide = random_matrix(rng, rows, cols) * 1e5f;
    wide(0, 0) = std::nanf("");
    wide(1, 0) = 1e-7f;  // fp16 subnormal
    wide(2, 0) = 7e4f;   // fp16 overflow
    for (bool bf : {true, false}) {
      Matrix want = wide;
      DeviceMatrixCopy got(wide);
      if (bf) {
        round_to<bf16>(want.data(), std::size_t(want.size()));
        CudaBackend::round_to<bf16>(got.buffer.data(), std::size_t(want.size()));
      } else {
        round_to<fp16>(want.data(), std::size_t(want.size()));
        CudaBackend::round_to<fp16>(got.buffer.data(), std::size_t(want.size()));
      }
      Matrix const host = got.host();
      CHECK(std::memcmp(host.data() + 1, want.data() + 1, std::size_t(want.size() - 1) * sizeof(float)) == 0);
      CHECK(std::isnan(host(0, 0)));
    }
  }
}

namespace {
using GpuModel = Sequential<Dense<20, 32>, Relu, Dense<32, 24>, Tanh, Dense<24, 16>, Gelu, Dropout, Dense<16, 5>>;

// Trains a copy of `model` for `steps` batches under Trainer<Ps...>; returns its weights.
template <class... Ps, class Opt>
std::vector<float> train_copy(GpuModel model, Opt const& optimizer, int epochs, float clip = 0.0f) {
  Trainer<Ps...> trainer;
  trainer.fit(model, optimizer, SoftmaxCrossEntropy{}, synthetic(192, 7),
              {.epochs = epochs, .batch_size = 64, .shuffle = true, .seed = 3, .clip_global_norm = clip});
  return {model.parameters().begin(), model.parameters().end()};
}

double max_difference(std::span<float const> a, std::span<float const> b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}
}  // namespace

using ScheduledAdam = optim::Scheduled<Adam, CosineDecay>;  // its rule at the scheduled rate

TEST_CASE_TEMPLATE("gpu: every layer and optimizer trains as on the CPU (same weights, fp32 tolerance)", Opt, Sgd,
                   Adam, AdamW, Lamb, user::Rmsprop, ScheduledAdam) {
  GpuModel const model(21, {}, {}, {}, {}, {}, {}, Dropout{0.2f}, {});
  Opt optimizer{};
  if constexpr (std::is_same_v<Opt, Sgd>) optimizer = Sgd{.lr = 0.05f, .momentum = 0.9f, .nesterov = true};
  // A schedule that spans the run's 6 steps, so that every step's rate differs (CosineDecay's
  // default, decay_steps 1, would leave one step at a rate above zero).
  if constexpr (std::is_same_v<Opt, ScheduledAdam>)
    optimizer.schedule = {.decay_steps = 6, .alpha = 0.1f, .warmup_steps = 1};
  auto const cpu = train_copy<OneDevice>(model, optimizer, 2);
  auto const gpu = train_copy<OneDevice, Cuda>(model, optimizer, 2);
  CHECK(max_difference(cpu, gpu) < 2e-4);
  CHECK(max_difference(cpu, model.parameters()) > 1e-3);  // it trained
}

namespace {
// Trains a fresh Model(seed) for 2 epochs with Adam under Trainer<Ps...>; returns its weights.
template <class Model, class... Ps>
std::vector<float> train_fresh(std::uint64_t seed, int samples, int batch_size) {
  Model model(seed);
  Trainer<Ps...> trainer;
  trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, synthetic(samples, 7),
              {.epochs = 2, .batch_size = batch_size, .seed = 3});
  return {model.parameters().begin(), model.parameters().end()};
}
using Normed =
    Sequential<Dense<20, 32>, LayerNorm, Residual<Sequential<Dense<32, 48>, Gelu, Dense<48, 32>>>, Dense<32, 5>>;
// 40 features: one full block of 32 rows and a part-filled one for the gradients of gamma
// and beta; hundreds of columns, many blocks of warps; GradAccum adds to those gradients.
using Normed40 = Sequential<Dense<20, 40>, LayerNorm, Dense<40, 5>>;
}  // namespace

TEST_CASE("gpu: LayerNorm and Residual (their own kernel modules) train as on the CPU") {
  auto const cpu = train_fresh<Normed, OneDevice>(23, 192, 64);
  CHECK(max_difference(cpu, train_fresh<Normed, OneDevice, Cuda>(23, 192, 64)) < 2e-4);
  CHECK(max_difference(cpu, train_fresh<Normed, Mirrored<2>, Cuda>(23, 192, 64)) < 2e-4);
  CHECK(max_difference(cpu, Normed(23).parameters()) > 1e-3);  // it trained
}

TEST_CASE("gpu: LayerNorm over 40 features with GradAccum trains as on the CPU, and to the same bits twice") {
  auto const cpu = train_fresh<Normed40, OneDevice, GradAccum<2>>(29, 1200, 600);
  auto const gpu = train_fresh<Normed40, OneDevice, Cuda, GradAccum<2>>(29, 1200, 600);
  CHECK(max_difference(cpu, gpu) < 2e-4);
  CHECK(gpu == train_fresh<Normed40, OneDevice, Cuda, GradAccum<2>>(29, 1200, 600));  // every sum in a fixed order
  CHECK(max_difference(cpu, Normed40(29).parameters()) > 1e-3);                      // it trained
}

namespace {
// test_bert's sequences (marker_sequences.hpp); the ids of the last sample may be made out of range.
data::Dataset padded_sequences(int n, float bad_id = 0.0f) {
  auto [ids, classes] = marker_sequences(n);
  if (bad_id != 0.0f) ids(2, n - 1) = bad_id;
  return {ids, classes};
}
using GpuBert = Sequential<Bert<2, 32, 4, 64, 23, 6>, BertPooler<32, 6>, Dropout, Dense<32, 2>>;
template <class... Ps, class Opt>
std::vector<float> train_bert(Opt const& optimizer, int epochs, int batch) {
  GpuBert model(9, {}, {}, Dropout{0.1f}, {});
  Trainer<Ps...> trainer;
  trainer.fit(model, optimizer, SoftmaxCrossEntropy{}, padded_sequences(48),
              {.epochs = epochs, .batch_size = batch, .shuffle = true, .seed = 3});
  return {model.parameters().begin(), model.parameters().end()};
}
}  // namespace

// The CPU packs each sample's tokens and drops the padding; the GPU keeps the padded batch
// and masks the padding's keys (nn/attention_cuda.hpp). With the dropout bits of both the
// same, the two compute one function: the gradient of every parameter (one step of SGD at
// rate 1 on the whole set: before - after) and two epochs of AdamW agree in fp32.
TEST_CASE("gpu: Bert (Embedding, masked SelfAttention, FirstToken) computes the CPU's gradients and trains as on the CPU") {
  GpuBert const initial(9, {}, {}, Dropout{0.1f}, {});
  std::vector<float> const w0(initial.parameters().begin(), initial.parameters().end());
  auto const cpu_step = train_bert<OneDevice>(Sgd{.lr = 1.0f}, 1, 48);
  auto const gpu_step = train_bert<OneDevice, Cuda>(Sgd{.lr = 1.0f}, 1, 48);
  double largest = 0.0;
  for (std::size_t i = 0; i < w0.size(); ++i) largest = std::max(largest, double(std::abs(w0[i] - cpu_step[i])));
  MESSAGE("gradient: largest component ", largest, ", largest CPU-GPU difference ", max_difference(cpu_step, gpu_step));
  CHECK(largest > 1e-3);
  CHECK(max_difference(cpu_step, gpu_step) < 1e-5 * std::max(1.0, largest) + 1e-6);

  auto const cpu = train_bert<OneDevice>(AdamW{.lr = 5e-3f}, 2, 16);
  CHECK(max_difference(cpu, train_bert<OneDevice, Cuda>(AdamW{.lr = 5e-3f}, 2, 16)) < 2e-4);
  CHECK(max_difference(cpu, train_bert<Mirrored<2>, Cuda>(AdamW{.lr = 5e-3f}, 2, 16)) < 2e-4);
  CHECK(max_difference(cpu, w0) > 1e-3);  // it trained

  // A token id outside the vocabulary: the CPU's error, and the weights are left alone.
  GpuBert model(9);
  Trainer<OneDevice, Cuda> trainer;
  CHECK_THROWS_WITH_AS(trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, padded_sequences(8, 23.0f),
                                   {.epochs = 1, .batch_size = 8, .shuffle = false}),
                       "Embedding: token id 23 at position 2 of sample 7 in this batch is not an id in [0, 23)", DataError);
  CHECK(std::equal(model.parameters().begin(), model.parameters().end(), GpuBert(9).parameters().begin()));
}

TEST_CASE("gpu: logical Mirrored<2> on one GPU matches OneDevice; clipping, GradAccum and Lamb as on the CPU") {
  GpuModel const model(22);
  CHECK(max_difference(train_copy<OneDevice, Cuda>(model, Adam{}, 2), train_copy<Mirrored<2>, Cuda>(model, Adam{}, 2)) < 1e-4);
  CHECK(max_difference(train_copy<Mirrored<2>, Cuda>(model, Adam{}, 1, 0.05f), train_copy<Mirrored<2>>(model, Adam{}, 1, 0.05f)) < 2e-4);
  CHECK(max_difference(train_copy<Mirrored<3>, Cuda, GradAccum<2>>(model, Sgd{.lr = 0.1f}, 2),
                       train_copy<OneDevice, GradAccum<2>>(model, Sgd{.lr = 0.1f}, 2)) < 2e-4);
  // Lamb's trust ratios over tensors that straddle two replicas' slices.
  Lamb const lamb{.lr = 1e-2f, .exclude_from_weight_decay = {"bias"}};
  CHECK(max_difference(train_copy<Mirrored<2>, Cuda>(model, lamb, 2), train_copy<Mirrored<2>>(model, lamb, 2)) < 2e-4);
}

namespace {
// An optimizer with only a CPU update: Mirrored<N> on Cuda refuses it, CentralStorage runs it.
struct CpuOnlyAdam : Adam {
  static constexpr char const* name = "CpuOnlyAdam";
  int rule(StepInfo) const { return 0; }  // hides Adam's: no element rule left
};
static_assert(!train::has_device_update<CpuOnlyAdam>);

// CentralStorage<2> on Cuda (variables on the host, updated by the CPU) against the GPU's
// Mirrored<2> and against the CPU's CentralStorage<2>, which is Mirrored<2>'s step.
void central_storage_matches(GpuModel const& model) {
  CHECK(max_difference(train_copy<CentralStorage<2>, Cuda>(model, Adam{}, 2), train_copy<Mirrored<2>, Cuda>(model, Adam{}, 2)) < 1e-4);
  CHECK(max_difference(train_copy<CentralStorage<2>, Cuda>(model, Adam{}, 2), train_copy<CentralStorage<2>>(model, Adam{}, 2)) < 2e-4);
  CHECK(max_difference(train_copy<CentralStorage<2>, Cuda>(model, Adam{}, 1, 0.05f), train_copy<CentralStorage<2>>(model, Adam{}, 1, 0.05f)) < 2e-4);
  Sgd const sgd{.lr = 0.1f, .momentum = 0.9f};
  CHECK(max_difference(train_copy<CentralStorage<3>, Cuda, GradAccum<2>>(model, sgd, 2),
                       train_copy<OneDevice, GradAccum<2>>(model, sgd, 2)) < 2e-4);
  Lamb const lamb{.lr = 1e-2f, .exclude_from_weight_decay = {"bias"}};
  CHECK(max_difference(train_copy<CentralStorage<2>, Cuda>(model, lamb, 2), train_copy<CentralStorage<2>>(model, lamb, 2)) < 2e-4);
  CHECK(max_difference(train_copy<CentralStorage<2>, Cuda>(model, CpuOnlyAdam{}, 2), train_copy<CentralStorage<2>>(model, Adam{}, 2)) < 2e-4);
  CHECK(max_difference(train_copy<CentralStorage<2>, Cuda, MixedPrecision>(model, Adam{}, 1),
                       train_copy<CentralStorage<2>, MixedPrecision>(model, Adam{}, 1)) < 2e-2);
  CHECK(max_difference(train_copy<CentralStorage<2>, Cuda>(model, Adam{}, 2), model.parameters()) > 1e-3);  // it trained
}
}  // namespace

TEST_CASE("gpu: CentralStorage on Cuda (GPUs compute, the host updates) trains as Mirrored<2> and the CPU do") {
  central_storage_matches(GpuModel(26));
  // Two fits in a row: the second starts from the model's weights as the first left them
  // (the central copy is filled from the model, and the model from it at each epoch's end).
  auto const data = synthetic(192, 7);
  auto twice = [&](auto& trainer) {
    GpuModel model(27);
    for (int fit = 0; fit < 2; ++fit)
      trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 64, .seed = 3});
    return std::pair{std::vector<float>(model.parameters().begin(), model.parameters().end()),
                     trainer.evaluate(model, SoftmaxCrossEntropy{}, data, 64)};
  };
  Trainer<CentralStorage<2>, Cuda> gpu;
  Trainer<CentralStorage<2>> cpu;
  auto const [gpu_weights, gpu_eval] = twice(gpu);
  auto const [cpu_weights, cpu_eval] = twice(cpu);
  CHECK(max_difference(gpu_weights, cpu_weights) < 2e-4);
  CHECK(gpu_eval.loss == doctest::Approx(cpu_eval.loss).epsilon(1e-4));
}

namespace {
// fit validates on the runner's passes and the weights on its GPUs (train/evaluator.hpp,
// RunnerReplicas): each epoch's figures against a fresh trainer's evaluate on that epoch's
// weights, which uploads them to passes of its own.
template <class... Policies>
void validation_matches_evaluate() {
  auto const train = synthetic(192, 7), validation = synthetic(96, 8);
  GpuModel model(28);
  std::vector<std::vector<float>> weights;
  History const history = Trainer<Policies...>().fit(model, Adam{}, SoftmaxCrossEntropy{}, train,
                                                     {.epochs = 2, .batch_size = 64, .validation = validation, .seed = 3},
                                                     WeightsAfterEachEpoch<GpuModel>{&model, &weights});
  REQUIRE(weights.size() == 2);
  for (std::size_t e = 0; e < 2; ++e) {
    GpuModel fresh(28);
    std::copy(weights[e].begin(), weights[e].end(), fresh.parameters().begin());
    Evaluation const expected = Trainer<Policies...>().evaluate(fresh, SoftmaxCrossEntropy{}, validation, 64);
    CHECK(history["val_loss"][e] == doctest::Approx(expected.loss).epsilon(1e-6));
    CHECK(history["val_accuracy"][e] == *expected.accuracy);
  }
}
}  // namespace

TEST_CASE("gpu: fit validates on the runner's passes and GPU weights, as evaluate does on the epoch's weights") {
  validation_matches_evaluate<Mirrored<2>, Cuda>();
  validation_matches_evaluate<Mirrored<2>, Cuda, MixedPrecision>();
  validation_matches_evaluate<CentralStorage<2>, Cuda>();
}

TEST_CASE("gpu: a batch copied ahead during the previous step trains exactly as one copied on demand") {
  using Config = policy::Config<Mirrored<2>, Cuda>;
  auto const data = synthetic(192, 7);
  std::vector<data::Batch> batches;
  for (int k = 0; k < 3; ++k)
    batches.push_back({data.features().columns(64 * k, 64), data.targets().columns(64 * k, 64), 64, k});
  // ahead 0: no next batch; 1: the true next batch (staged and used); 2: a wrong guess
  // (staged, then not the batch of the next call, which copies its own).
  auto run = [&](int ahead) {
    GpuModel model(25);
    strategy::BasicStrategy<Config> strategy;
    train::StepRunner<Config, GpuModel, Adam, SoftmaxCrossEntropy> runner(strategy, model, Adam{}, SoftmaxCrossEntropy{}, 64, 0);
    std::vector<double> losses;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (int k = 0; k < 3; ++k) {
        data::Batch const* next = ahead == 0 ? nullptr : ahead == 1 ? (k < 2 ? &batches[std::size_t(k + 1)] : nullptr)
                                                                     : &batches[std::size_t((k + 2) % 3)];
        auto const tally = runner.train_on_batch(batches[std::size_t(k)], next);
        CHECK(tally.samples == 64);
        losses.push_back(tally.loss_sum);
      }
    runner.sync_to_host();
    return std::pair{losses, std::vector<float>(model.parameters().begin(), model.parameters().end())};
  };
  auto const on_demand = run(0);
  CHECK(run(1) == on_demand);  // the same kernels on the same bytes: bit for bit
  CHECK(run(2) == on_demand);

  // A bad label in a batch that was copied ahead is named when its step reads the loss.
  Matrix labels = strata::detail::eigen(batches[1].targets);
  labels(0, 5) = 7.0f;
  data::Batch bad = batches[1];
  bad.targets = view(labels);
  GpuModel model(25);
  strategy::BasicStrategy<Config> strategy;
  train::StepRunner<Config, GpuModel, Adam, SoftmaxCrossEntropy> runner(strategy, model, Adam{}, SoftmaxCrossEntropy{}, 64, 0);
  runner.train_on_batch(batches[0], &bad);
  CHECK_THROWS_WITH_AS(runner.train_on_batch(bad), doctest::Contains("label 7 of sample 5"), DataError);
  CHECK(runner.optimizer_steps() == 1);

  // Evaluation copies ahead too (batches of 48: three full, the last of 48 again of 192).
  Trainer<Mirrored<2>, Cuda> gpu;
  Trainer<Mirrored<2>> cpu;
  auto const on_gpu = gpu.evaluate(model, SoftmaxCrossEntropy{}, data, 48);
  auto const on_cpu = cpu.evaluate(model, SoftmaxCrossEntropy{}, data, 48);
  CHECK(on_gpu.samples == 192);
  CHECK(on_gpu.loss == doctest::Approx(on_cpu.loss).epsilon(1e-5));
  CHECK(*on_gpu.accuracy == *on_cpu.accuracy);
  Matrix all_labels = strata::detail::eigen(data.targets());
  all_labels(0, 150) = 9.0f;
  data::Dataset const mislabelled(features_of(data), all_labels);
  train::Evaluator<Config, GpuModel> evaluator(gpu.strategy(), model, 48);  // past Trainer's up-front check
  CHECK_THROWS_WITH_AS(evaluator.evaluate(SoftmaxCrossEntropy{}, mislabelled), doctest::Contains("label 9 of sample"),
                       DataError);
}

TEST_CASE("gpu: mixed precision on tensor cores stays within 16-bit tolerance of the CPU") {
  GpuModel const model(23);
  CHECK(max_difference(train_copy<Cuda, MixedPrecision>(model, Adam{}, 1), train_copy<MixedPrecision>(model, Adam{}, 1)) < 2e-2);
  CHECK(max_difference(train_copy<Cuda, MixedPrecisionFp16>(model, Adam{}, 1), train_copy<MixedPrecisionFp16>(model, Adam{}, 1)) < 2e-2);
}

TEST_CASE("gpu: the Fashion-MNIST MLP reaches the CPU's accuracy; evaluate and predict agree") {
  using Mlp = Sequential<Dense<784, 256>, Relu, Dense<256, 10>>;
  auto const train = data::fashion_mnist(data::Split::train).take(20000);
  auto const test = data::fashion_mnist(data::Split::test);
  auto fit = [&](auto& trainer) {
    Mlp model(4);
    trainer.fit(model, Adam{.lr = 1e-3f}, SoftmaxCrossEntropy{}, train, {.epochs = 3, .batch_size = 128, .seed = 1});
    return std::pair{trainer.evaluate(model, SoftmaxCrossEntropy{}, test), model.predict(features_of(test))};
  };
  Trainer<Mirrored<2>> cpu;
  Trainer<Mirrored<2>, Cuda> gpu;
  auto const [cpu_eval, cpu_out] = fit(cpu);
  auto const [gpu_eval, gpu_out] = fit(gpu);
  MESSAGE("test accuracy: CPU " << *cpu_eval.accuracy << ", GPU " << *gpu_eval.accuracy);
  CHECK(*gpu_eval.accuracy > 0.84);
  CHECK(std::abs(*gpu_eval.accuracy - *cpu_eval.accuracy) < 0.01);
  Mlp model(4);
  Matrix const predicted = gpu.predict(model, test);
  CHECK(max_relative_error(predicted, model.predict(features_of(test))) < 1e-5);
}

TEST_CASE("gpu: a profiled fit trains the same weights and reports the GPU's memory") {
  using Mlp = Sequential<Dense<784, 64>, Relu, Dense<64, 10>>;
  auto const train = data::fashion_mnist(data::Split::train).take(1000);
  auto weights = [&](auto&&... callbacks) {
    Mlp model(4);
    Trainer<Mirrored<2>, Cuda> trainer;
    trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, train, {.epochs = 1, .batch_size = 100}, callbacks...);
    return std::vector<float>(model.parameters().begin(), model.parameters().end());
  };
  Profiler profiler({.summary = false});
  CHECK(weights(profiler) == weights());
  auto const& report = profiler.report();
  CHECK(report.steps == 10);
  CHECK(report.memory.device > 0);  // cudaMemGetInfo: bytes in use on the GPU
  CHECK(report.seconds_of(profile::Phase::backward).value_or(0.0) > 0.0);
  MESSAGE(report.table());
}

namespace {
// Where the replicas of a step under Strategy on Cuda compute, and (Mirrored) whether its
// gradients cross GPUs.
template <class Strategy>
std::pair<std::vector<int>, bool> replica_devices_of() {
  using Config = policy::Config<Strategy, Cuda>;
  using Probe = Sequential<Dense<4, 3>>;
  strategy::BasicStrategy<Config> strategy;
  Probe probe(1);
  train::StepRunner<Config, Probe, Sgd, SoftmaxCrossEntropy> runner(strategy, probe, Sgd{}, SoftmaxCrossEntropy{}, 4, 0);
  bool across = false;
  if constexpr (requires { runner.gradient_sync().across_gpus(); }) across = runner.gradient_sync().across_gpus();
  return {runner.gradient_sync().devices(), across};
}
}  // namespace

TEST_CASE("gpus2: Mirrored<2> with one GPU per replica over NCCL matches OneDevice and the CPU") {
  auto const [devices, across] = replica_devices_of<Mirrored<2>>();
  CHECK(across);
  CHECK(devices == std::vector<int>{0, 1});

  GpuModel const model(24);
  CHECK(max_difference(train_copy<OneDevice, Cuda>(model, Adam{}, 2), train_copy<Mirrored<2>, Cuda>(model, Adam{}, 2)) < 1e-4);
  Sgd const sgd{.lr = 0.1f, .momentum = 0.9f};
  CHECK(max_difference(train_copy<OneDevice, GradAccum<2>>(model, sgd, 2), train_copy<Mirrored<2>, Cuda, GradAccum<2>>(model, sgd, 2)) < 2e-4);
  CHECK(max_difference(train_copy<Mirrored<2>>(model, AdamW{}, 1, 0.05f), train_copy<Mirrored<2>, Cuda>(model, AdamW{}, 1, 0.05f)) < 2e-4);
  CHECK(max_difference(train_copy<Mirrored<2>>(model, Lamb{}, 2), train_copy<Mirrored<2>, Cuda>(model, Lamb{}, 2)) < 2e-4);
}

TEST_CASE("gpus2: CentralStorage<2> with one GPU per replica trains as Mirrored<2> and the CPU do") {
  CHECK(replica_devices_of<CentralStorage<2>>().first == std::vector<int>{0, 1});
  central_storage_matches(GpuModel(28));
}

int main(int argc, char** argv) { return gpu_test_main(argc, argv, "Cuda backend", 540); }
