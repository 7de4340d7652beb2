// Layers, Sequential, losses: gradients against central differences, closed forms, bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "gradient_check.hpp"
#include "strata.hpp"

using namespace strata;

namespace {
Matrix random_matrix(int rows, int cols, std::uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  Matrix m(rows, cols);
  for (int i = 0; i < m.size(); ++i) m.data()[i] = (2.0f * rng.uniform() - 1.0f) * scale;
  return m;
}
Matrix labels(std::vector<float> values) {
  Matrix m(1, Eigen::Index(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) m(0, Eigen::Index(i)) = values[i];
  return m;
}
}  // namespace

// Each activation sits between two Dense layers, so the first Dense's parameter gradients
// check the activation's backward pass too.
TEST_CASE_TEMPLATE("backward matches central differences", Activation, Relu, Tanh, Gelu) {
  Sequential<Dense<5, 6>, Activation, Dense<6, 4>> model(11);
  check_gradients(model, random_matrix(5, 7, 1), labels({0, 1, 2, 3, 0, 1, 2}), SoftmaxCrossEntropy{}, {});
}

// GELU runs a rational approximation of erf on whole registers: its values and derivative
// against x Phi(x) computed in double, over the range where Phi is neither 0 nor 1 in float
// and beyond, with a length that leaves a partial block.
TEST_CASE("Gelu and its derivative match x Phi(x) in double") {
  int const n = 16001;
  Matrix x(1, n), y(1, n), dy = Matrix::Constant(1, n, 1.0f), dx(1, n);
  for (int i = 0; i < n; ++i) x(0, i) = -8.0f + 16.0f * float(i) / float(n - 1);
  nn::ActivationMath<CpuBackend>::gelu(view(x), view(y));
  nn::ActivationMath<CpuBackend>::gelu_backward(view(x), view(dy), view(dx));
  double worst_value = 0, worst_slope = 0;
  for (int i = 0; i < n; ++i) {
    double const v = x(0, i), cdf = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
    double const pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    worst_value = std::max(worst_value, std::abs(y(0, i) - v * cdf) / std::max(1.0, std::abs(v)));
    worst_slope = std::max(worst_slope, std::abs(dx(0, i) - (cdf + v * pdf)) / std::max(1.0, std::abs(v)));
  }
  // Relative to max(1, |x|): erf is within 3.3e-7, and GELU scales its error by |x|/2.
  MESSAGE("worst value error ", worst_value, ", worst slope error ", worst_slope);
  CHECK(worst_value < 3e-7);
  CHECK(worst_slope < 3e-7);
  CHECK(y(0, 0) == 0.0f);       // far left: exactly 0
  CHECK(y(0, n - 1) == 8.0f);   // far right: exactly x
}

// Replicas split a batch anywhere, so a value's GELU must not depend on where it sits in
// the array (the head, the middle or the ragged tail of a block): bit for bit.
TEST_CASE("Gelu gives every value the same bits wherever it sits in the array") {
  Matrix const values = random_matrix(1, 37, 12, 5.0f), dy = random_matrix(1, 37, 13);
  Matrix alone(1, 37), alone_dx(1, 37);
  nn::ActivationMath<CpuBackend>::gelu(view(values), view(alone));
  nn::ActivationMath<CpuBackend>::gelu_backward(view(values), view(dy), view(alone_dx));
  for (int const offset : {1, 3, 7, 16, 499, 510, 1000}) {
    int const n = offset + 37 + offset % 5;
    Matrix x = random_matrix(1, n, 14), d = random_matrix(1, n, 15), y(1, n), dx(1, n);
    x.middleCols(offset, 37) = values;
    d.middleCols(offset, 37) = dy;
    nn::ActivationMath<CpuBackend>::gelu(view(x), view(y));
    nn::ActivationMath<CpuBackend>::gelu_backward(view(x), view(d), view(dx));
    CHECK(std::memcmp(y.data() + offset, alone.data(), 37 * sizeof(float)) == 0);
    CHECK(std::memcmp(dx.data() + offset, alone_dx.data(), 37 * sizeof(float)) == 0);
  }
}

TEST_CASE("Dropout's backward matches central differences under a fixed mask") {
  Sequential<Dense<5, 8>, Dropout, Dense<8, 3>> model(2, {}, Dropout{0.3f}, {});
  check_gradients(model, random_matrix(5, 6, 4), labels({0, 1, 2, 0, 1, 2}), SoftmaxCrossEntropy{},
                  {.training = true, .seed = 99, .first_sample = 0});
}

TEST_CASE("MeanSquaredError's backward matches central differences") {
  Sequential<Dense<4, 6, HeUniform>, Tanh, Dense<6, 3>> model(5);
  check_gradients(model, random_matrix(4, 5, 8), random_matrix(3, 5, 9), MeanSquaredError{}, {});
}

TEST_CASE("losses agree with closed forms") {
  Matrix zeros = Matrix::Zero(4, 3), d(4, 3);
  // Equal logits: the loss is log(C) per sample, the gradient softmax - onehot = 1/C - [label].
  double const sce = nn::LossMath<CpuBackend>::softmax_cross_entropy(view(zeros), view(labels({0, 3, 1})), view(d), 1.0f);
  CHECK(sce == doctest::Approx(3 * std::log(4.0)));
  CHECK(d(0, 0) == doctest::Approx(0.25 - 1.0));
  CHECK(d(1, 0) == doctest::Approx(0.25));
  Matrix prediction(2, 2), target(2, 2), dp(2, 2);
  prediction << 1, 2, 3, 4;
  target << 0, 2, 1, 1;
  // Per sample: mean over the 2 features of the squared error; sample 0: (1 + 4)/2, sample 1: (0 + 9)/2.
  CHECK(nn::LossMath<CpuBackend>::mean_squared_error(view(prediction), view(target), view(dp), 1.0f) == doctest::Approx(7.0));
  CHECK(dp(1, 1) == doctest::Approx(3.0));  // 2 * (4 - 1) / 2
  Matrix logits(3, 2);
  logits << 0.1f, 5, 2, 1, 0, 0;
  CHECK(nn::AccuracyMath<CpuBackend>::count_correct(view(logits), view(labels({1, 2}))) == 1);
}

TEST_CASE("Dropout at inference is the identity, in training it keeps about 1-rate, scaled") {
  Sequential<Dense<4, 400>, Dropout> model(1, {}, Dropout{0.25f});
  Sequential<Dense<4, 400>, Dropout>::Workspace<CpuBackend> ws(50);
  Matrix x = random_matrix(4, 50, 3);
  model.forward(ws, model.parameters().data(), view(x), {});
  Matrix const plain = detail::eigen(ws.output());
  model.forward(ws, model.parameters().data(), view(x), {.training = true, .seed = 1, .first_sample = 0});
  Matrix const dropped = detail::eigen(ws.output());
  auto kept = ((dropped.array() != 0.0f) && (plain.array() != 0.0f)).count();
  CHECK(double(kept) / double(plain.size()) == doctest::Approx(0.75).epsilon(0.03));
  for (int i = 0; i < plain.size(); ++i)
    if (dropped.data()[i] != 0.0f) CHECK(dropped.data()[i] == doctest::Approx(plain.data()[i] / 0.75f));
  // The mask of a sample depends on its position in the global batch, not on the shard it is in.
  Sequential<Dense<4, 400>, Dropout>::Workspace<CpuBackend> half(25);
  model.forward(half, model.parameters().data(), view(x).columns(25, 25),
                {.training = true, .seed = 1, .first_sample = 25});
  CHECK(detail::eigen(half.output()) == dropped.rightCols(25));
}

TEST_CASE("Sequential lays out one aligned arena and reports its shape") {
  using Model = Sequential<Dense<784, 256>, Relu, Dense<256, 10>>;
  CHECK(Model::input_width == 784);
  CHECK(Model::output_width == 10);
  CHECK(Model::parameter_count == 784 * 256 + 256 + 256 * 10 + 10);
  CHECK(Model::offsets[1] % cache_line_floats == 0);
  CHECK(Model::offsets[2] == Model::offsets[1]);  // Relu has no parameters
  CHECK(Model::arena_size >= Model::parameter_count);
  Model model(3);
  CHECK(reinterpret_cast<std::uintptr_t>(model.parameters().data()) % 64 == 0);
  CHECK(Model::name() == "Sequential<Dense<784, 256>, Relu, Dense<256, 10>>");
  // Glorot uniform bounds; zero biases.
  float const limit = std::sqrt(6.0f / (784 + 256));
  auto w = model.parameters().subspan(0, 784 * 256);
  CHECK(*std::max_element(w.begin(), w.end()) <= limit);
  CHECK(*std::min_element(w.begin(), w.end()) >= -limit);
  CHECK(*std::max_element(w.begin(), w.end()) > 0.9f * limit);
  CHECK(model.parameters()[784 * 256] == 0.0f);
  // Same seed, same weights; another seed, other weights.
  Model same(3), other(4);
  CHECK(std::equal(same.parameters().begin(), same.parameters().end(), model.parameters().begin()));
  CHECK_FALSE(std::equal(other.parameters().begin(), other.parameters().end(), model.parameters().begin()));
}

TEST_CASE("Sequential::predict equals the layers written out by hand") {
  Sequential<Dense<3, 4>, Relu, Dense<4, 2>> model(8);
  Matrix x = random_matrix(3, 9, 2);
  auto p = model.parameters();
  Eigen::Map<Matrix const> w1(p.data(), 4, 3), w2(p.data() + decltype(model)::offsets[2], 2, 4);
  Eigen::Map<Vector const> b1(p.data() + 12, 4), b2(p.data() + decltype(model)::offsets[2] + 8, 2);
  Matrix hidden = ((w1 * x).colwise() + b1).cwiseMax(0.0f);
  Matrix expected = (w2 * hidden).colwise() + b2;
  CHECK((model.predict(x, 4) - expected).cwiseAbs().maxCoeff() < 1e-6f);
}

TEST_CASE("bad input to a model gets a ShapeError or DataError naming the value") {
  using Model = Sequential<Dense<784, 256>, Relu, Dense<256, 10>>;
  CHECK_THROWS_WITH_AS(Model::check_input_width(783), "Dense<784, 256>: input has 783 features, the model expects 784",
                       ShapeError);
  Model model;
  CHECK_THROWS_AS((void)model.predict(Matrix::Zero(783, 2)), ShapeError);
  CHECK_THROWS_WITH_AS(SoftmaxCrossEntropy::validate(view(labels({1, 10, 2})), 10),
                       "SoftmaxCrossEntropy: label 10 of sample 1 is not a class index in [0, 10); the model's last "
                       "layer has 10 outputs",
                       DataError);
  CHECK_THROWS_AS(SoftmaxCrossEntropy::validate(view(labels({1.5f})), 10), DataError);
  CHECK_THROWS_AS(SoftmaxCrossEntropy::validate(view(labels({-1})), 10), DataError);
  CHECK_THROWS_AS(MeanSquaredError::validate(view(Matrix::Zero(2, 3)), 3), ShapeError);
  Rng rng(1);
  CHECK_THROWS_WITH_AS(Dropout{1.0f}.initialize(nullptr, 1, rng),
                       "Dropout: rate 1 is outside [0, 1); use e.g. Dropout{0.2f}", ConfigError);
}

// LayerNorm and Residual: the layers added on the layer protocol (own scratch, own math).
TEST_CASE("LayerNorm's and Residual's backward match central differences") {
  Sequential<Dense<5, 6>, LayerNorm, Tanh, Dense<6, 4>> normed(11);
  check_gradients(normed, random_matrix(5, 7, 1), labels({0, 1, 2, 3, 0, 1, 2}), SoftmaxCrossEntropy{}, {});
  // gamma and beta away from 1 and 0, so their gradients are not a special case
  auto p = normed.parameters();
  for (int i = 0; i < 12; ++i) p[decltype(normed)::offsets[1] + std::size_t(i)] = 0.5f + 0.1f * float(i);
  check_gradients(normed, random_matrix(5, 7, 2), labels({0, 1, 2, 3, 0, 1, 2}), SoftmaxCrossEntropy{}, {});

  // A skip connection around a block that itself holds a LayerNorm; the first layer a Residual.
  using Block = Sequential<Dense<6, 8>, Gelu, Dense<8, 6>, LayerNorm>;
  Sequential<Residual<Block>, Relu, Residual<Sequential<Dense<6, 6>, Relu>>, Dense<6, 4>> skip(12);
  check_gradients(skip, random_matrix(6, 7, 3), labels({0, 1, 2, 3, 0, 1, 2}), SoftmaxCrossEntropy{}, {});
  Sequential<Dense<5, 6>, Residual<Block>, Dense<6, 3>> inside(13);
  check_gradients(inside, random_matrix(5, 4, 4), random_matrix(3, 4, 5), MeanSquaredError{}, {});
}

TEST_CASE("LayerNorm normalises each column (closed form) and Residual adds its input to its block's output") {
  Sequential<Dense<4, 6>, LayerNorm> normed(3);
  Matrix const x = random_matrix(4, 5, 6, 3.0f);
  Matrix const y = normed.predict(x);
  auto const p = normed.parameters();
  Eigen::Map<Matrix const> w(p.data(), 6, 4);
  Eigen::Map<Vector const> b(p.data() + 24, 6);
  Matrix const h = (w * x).colwise() + b;
  for (int j = 0; j < 5; ++j) {
    double const mean = h.col(j).cast<double>().mean();
    double const var = (h.col(j).cast<double>().array() - mean).square().mean();
    Vector const expected = ((h.col(j).cast<double>().array() - mean) / std::sqrt(var + 1e-5)).cast<float>();
    CHECK((y.col(j) - expected).cwiseAbs().maxCoeff() < 1e-5f);
    CHECK(std::abs(y.col(j).mean()) < 1e-5f);
  }

  // Residual<Block> against the block alone with the same weights: y = x + block(x).
  using Block = Sequential<Dense<6, 8>, Gelu, Dense<8, 6>>;
  Sequential<Residual<Block>> skip(4);
  Block block(0);
  std::copy_n(skip.parameters().data(), Block::arena_size, block.parameters().data());
  Matrix const input = random_matrix(6, 9, 7);
  CHECK((skip.predict(input) - (input + block.predict(input))).cwiseAbs().maxCoeff() < 1e-6f);
  CHECK(decltype(skip)::parameter_count == Block::parameter_count);
}

TEST_CASE("LayerNorm and Residual name their parameters for checkpoints and check their configuration") {
  using Model = Sequential<Dense<4, 6>, LayerNorm, Residual<Sequential<Dense<6, 3>, Relu, Dense<3, 6>>>, Dense<6, 2>>;
  auto const tensors = Model::parameter_tensors();
  std::vector<std::string> names;
  for (auto const& t : tensors) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"dense_0/kernel", "dense_0/bias", "layer_norm_1/gamma", "layer_norm_1/beta",
                                          "residual_2/dense_0/kernel", "residual_2/dense_0/bias",
                                          "residual_2/dense_2/kernel", "residual_2/dense_2/bias", "dense_3/kernel",
                                          "dense_3/bias"});
  CHECK(tensors[2].offset == Model::offsets[1]);
  CHECK(tensors[4].offset == Model::offsets[2]);
  // Read transposed (for an input gradient): every kernel but the first layer's, whose input
  // gradient the model never asks for, and a block's first kernel where the block is first.
  using Reads = nn::ParameterTensor::TransposedReads;
  std::vector<Reads> reads;
  for (auto const& t : tensors) reads.push_back(t.read_transposed);
  CHECK(reads == std::vector<Reads>{Reads::never, Reads::possible, Reads::possible, Reads::possible, Reads::possible,
                                    Reads::possible, Reads::possible, Reads::possible, Reads::possible,
                                    Reads::possible});
  using BlockFirst = Sequential<Residual<Sequential<Dense<6, 3>, Relu, Dense<3, 6>>>, Dense<6, 2>>;
  reads.clear();
  for (auto const& t : BlockFirst::parameter_tensors()) reads.push_back(t.read_transposed);
  CHECK(reads == std::vector<Reads>{Reads::never, Reads::possible, Reads::possible, Reads::possible, Reads::possible,
                                    Reads::possible});
  CHECK(Model::parameter_count == 4 * 6 + 6 + 12 + (6 * 3 + 3 + 3 * 6 + 6) + 6 * 2 + 2);
  Model model(1);
  CHECK(model.parameters()[Model::offsets[1]] == 1.0f);  // gamma starts at 1
  CHECK(model.parameters()[Model::offsets[1] + 6] == 0.0f);  // beta at 0
  using Bad = Sequential<Dense<4, 6>, LayerNorm>;
  CHECK_THROWS_WITH_AS(Bad(1, {}, LayerNorm{.epsilon = 0.0f}),
                       "LayerNorm: epsilon 0 must be a finite number > 0; use e.g. LayerNorm{.epsilon = 1e-5f}",
                       ConfigError);
}

TEST_CASE("a model's largest activation counts the inside of its Residual blocks") {
  using Model = Sequential<Dense<8, 16>, Residual<Sequential<Dense<16, 64>, Gelu, Dense<64, 16>>>, Dense<16, 2>>;
  CHECK(Model::largest_activation_per_sample == 64);
  CHECK(Sequential<Dense<784, 32>, Relu, Dense<32, 10>>::largest_activation_per_sample == 784);
}

namespace {
// Two test layers that change a sample's columns, as an embedding (one sample, many tokens)
// and a pooler (many tokens, one vector) do: Unfold<K> reads a sample's W features as K
// columns of W/K (the same memory), MeanPool<K> averages each sample's K columns.
template <int K>
struct Unfold : nn::ParameterFreeLayer {
  static constexpr int output_width(int width) { return width / K; }
  static constexpr int output_columns(int columns) { return columns * K; }
  static std::string name() { return "Unfold"; }
  template <class B>
  void forward(float const*, ConstMatrixView x, MatrixView y, nn::Scratch, nn::ForwardContext const&) const {
    if (y.size() != x.size()) throw std::logic_error("Unfold: sizes differ");
    std::copy_n(x.data, x.size(), y.data);
  }
  template <class B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView, nn::Scratch, ConstMatrixView dy, MatrixView dx,
                bool) const {
    if (dx.data != nullptr) std::copy_n(dy.data, dy.size(), dx.data);
  }
};
template <int K>
struct MeanPool : nn::ParameterFreeLayer {
  static constexpr int output_columns(int columns) { return columns / K; }
  static std::string name() { return "MeanPool"; }
  template <class B>
  void forward(float const*, ConstMatrixView x, MatrixView y, nn::Scratch, nn::ForwardContext const&) const {
    if (x.cols != K * y.cols) throw std::logic_error("MeanPool: columns differ");
    detail::eigen(y).setZero();
    for (int j = 0; j < x.cols; ++j) detail::eigen(y).col(j / K) += detail::eigen(x).col(j) / float(K);
  }
  template <class B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView, nn::Scratch, ConstMatrixView dy, MatrixView dx,
                bool) const {
    if (dx.data == nullptr) return;
    for (int j = 0; j < dx.cols; ++j) detail::eigen(dx).col(j) = detail::eigen(dy).col(j / K) / float(K);
  }
};
}  // namespace

TEST_CASE("layers may change a sample's columns (per token in, per sequence out), also inside a Residual") {
  using Tokens = Sequential<Dense<6, 8>, Unfold<2>, Dense<4, 5>, Tanh, LayerNorm,
                            Residual<Sequential<Dense<5, 7>, Gelu, Dense<7, 5>>>, Dropout, MeanPool<2>, Dense<5, 3>>;
  CHECK(Tokens::columns == std::array<int, 10>{1, 1, 2, 2, 2, 2, 2, 2, 1, 1});
  Tokens model(5, {}, {}, {}, {}, {}, {}, Dropout{0.3f}, {}, {});
  nn::ForwardContext const training{true, 77, 0};
  check_gradients(model, random_matrix(6, 5, 8), labels({0, 1, 2, 0, 1}), SoftmaxCrossEntropy{}, training);

  // The per-token part against the same arithmetic column by column: a sample's two tokens
  // are its 8 features read as two columns of 4.
  Sequential<Dense<6, 8>, Unfold<2>, Dense<4, 5>, MeanPool<2>> pooled(6);
  Matrix const x = random_matrix(6, 3, 9);
  auto const p = pooled.parameters();
  Eigen::Map<Matrix const> w1(p.data(), 8, 6), w2(p.data() + decltype(pooled)::offsets[2], 5, 4);
  Eigen::Map<Vector const> b1(p.data() + 48, 8), b2(p.data() + decltype(pooled)::offsets[2] + 20, 5);
  Matrix hidden = (w1 * x).colwise() + b1;
  Eigen::Map<Matrix const> tokens(hidden.data(), 4, 6);
  Matrix const per_token = (w2 * tokens).colwise() + b2;
  Matrix expected(5, 3);
  for (int s = 0; s < 3; ++s) expected.col(s) = (per_token.col(2 * s) + per_token.col(2 * s + 1)) / 2.0f;
  CHECK((pooled.predict(x) - expected).cwiseAbs().maxCoeff() < 1e-5f);

  // Mixed precision keeps the per-token activations (and the LayerNorm's statistics, in float)
  // for backward across chunks of samples: a bf16 pass stays close to the float one.
  Tokens::Workspace<CpuBackend> full(300);
  Tokens::Workspace<CpuBackend, bf16> half(300);
  CHECK(Tokens::Workspace<CpuBackend, bf16>::chunk_samples == 128);  // 256 columns of 2 tokens each
  Matrix const batch = random_matrix(6, 300, 10);
  Matrix const targets = random_matrix(1, 300, 11).cwiseAbs() * 2.9f;
  Matrix const classes = targets.array().floor().matrix();
  std::vector<float> grads[2];
  int k = 0;
  auto run = [&](auto& ws) {
    model.forward(ws, model.parameters().data(), view(batch), training);
    SoftmaxCrossEntropy{}.forward_backward<CpuBackend>(ws.output(), view(classes), ws.output_gradient(), 1.0f);
    model.backward(ws, model.parameters().data(), model.gradients().data(), view(batch), false);
    grads[k++].assign(model.gradients().begin(), model.gradients().end());
  };
  run(full);
  run(half);
  Eigen::Map<Vector const> g32(grads[0].data(), Eigen::Index(grads[0].size())), g16(grads[1].data(), Eigen::Index(grads[1].size()));
  CHECK((g16 - g32).norm() / g32.norm() < 0.05);
  CHECK((g16 - g32).norm() > 0.0);

  // Dropout's mask follows a token's place in the global batch: Mirrored<3> splits the
  // batches (31 samples each, unevenly) and still trains as OneDevice.
  Dataset const data(random_matrix(6, 93, 12), std::vector<std::int32_t>(93, 1));
  auto train = [&]<class T>(T trainer) {
    Tokens m(5, {}, {}, {}, {}, {}, {}, Dropout{0.3f}, {}, {});
    trainer.fit(m, Adam{}, SoftmaxCrossEntropy{}, data, {.epochs = 1, .batch_size = 31, .seed = 3});
    return Vector(Eigen::Map<Vector const>(m.parameters().data(), Eigen::Index(m.parameters().size())));
  };
  Vector const one = train(Trainer<OneDevice>{});
  Vector const three = train(Trainer<Mirrored<3>>{});
  CHECK((three - one).norm() / one.norm() < 1e-5);
}

// ---------------------------------------------------------------- BERT's layers

namespace {
// A tiny BERT: 2 layers, hidden 8, 2 heads, FFN 12, 23 token ids, 6 positions.
using TinyBert = Bert<2, 8, 2, 12, 23, 6>;
using TinyClassifier = Sequential<TinyBert, BertPooler<8, 6>, Dense<8, 3>>;

// Token ids as a model input: one column of MaxLen ids per sample, right-padded with 0.
Matrix token_ids(std::vector<std::vector<int>> const& samples, int max_length) {
  Matrix m = Matrix::Zero(max_length, Eigen::Index(samples.size()));
  for (std::size_t s = 0; s < samples.size(); ++s)
    for (std::size_t t = 0; t < samples[s].size(); ++t) m(Eigen::Index(t), Eigen::Index(s)) = float(samples[s][t]);
  return m;
}
}  // namespace

TEST_CASE("Bert's backward (embedding, attention with padding and dropout, GELU, LayerNorm, pooler) matches central differences") {
  TinyClassifier model(21, TinyBert(BertOptions{.hidden_dropout = 0.2f, .attention_dropout = 0.25f}), {}, {});
  Matrix const x = token_ids({{2, 7, 9, 21, 3, 0}, {2, 5, 3}, {2, 22, 22, 1, 13, 3}, {2, 3}}, 6);
  nn::ForwardContext const training{.training = true, .seed = 5, .first_sample = 0};
  check_gradients(model, x, labels({0, 2, 1, 2}), SoftmaxCrossEntropy{}, training, 3e-4, 3e-2);
  nn::ForwardContext const inference{};
  TinyClassifier plain(22, TinyBert(BertOptions{.hidden_dropout = 0.0f, .attention_dropout = 0.0f}), {}, {});
  check_gradients(plain, x, labels({1, 0, 2, 1}), SoftmaxCrossEntropy{}, inference, 3e-4, 3e-2);
}

TEST_CASE("Bert: padding changes nothing at the real tokens (the same sequence with a shorter MaxLen is the oracle)") {
  using Long = Sequential<Bert<2, 8, 2, 12, 23, 6>, BertPooler<8, 6>>;
  using Short = Sequential<Bert<2, 8, 2, 12, 23, 4>, BertPooler<8, 4>>;
  Long long_model(3);
  Short short_model(4);
  // Copy every tensor by name; the short model's position table is the long one's first rows.
  auto const short_tensors = Short::parameter_tensors();
  for (auto const& t : Long::parameter_tensors())
    for (auto const& u : short_tensors)
      if (u.name == t.name)
        std::copy_n(long_model.parameters().data() + t.offset, nn::element_count(u.shape),
                    short_model.parameters().data() + u.offset);
  Matrix const padded = token_ids({{2, 7, 9, 3, 0, 0}, {2, 11, 3, 0, 0, 0}}, 6);
  Matrix const exact = token_ids({{2, 7, 9, 3}, {2, 11, 3, 0}}, 4);
  CHECK((long_model.predict(padded) - short_model.predict(exact)).cwiseAbs().maxCoeff() < 1e-5f);
  // ...and the padding is really masked: attending to it would change the [CLS] output.
  Short::Workspace<CpuBackend> ws(2);
  Matrix const unmasked = token_ids({{2, 7, 9, 3}, {2, 11, 3, 5}}, 4);
  CHECK((short_model.predict(unmasked).col(1) - short_model.predict(exact).col(1)).cwiseAbs().maxCoeff() > 1e-4f);
}

TEST_CASE("Embedding: ids reach it exactly under mixed precision; a bad id is a DataError naming it") {
  using Wide = Sequential<Bert<1, 8, 2, 12, 1000, 4>, BertPooler<8, 4>, Dense<8, 2>>;
  Wide model(9);
  Matrix const x = token_ids({{2, 999, 777, 3}, {2, 513, 3}}, 4);
  Wide::Workspace<CpuBackend> full(2);
  Wide::Workspace<CpuBackend, bf16> half(2);
  model.forward(full, model.parameters().data(), view(x), {});
  Matrix const f32 = detail::eigen(full.output());
  model.forward(half, model.parameters().data(), view(x), {});
  Matrix const b16 = detail::eigen(half.output());
  CHECK((f32 - b16).cwiseAbs().maxCoeff() < 0.05f);  // bf16 rounding, not other rows (777 -> 776 in bf16)
  Matrix bad = x;
  bad(2, 1) = 1000.0f;
  CHECK_THROWS_WITH_AS(model.predict(bad), "Embedding: token id 1000 at position 2 of sample 1 in this batch is not an id in [0, 1000)",
                       DataError);
}

TEST_CASE("two dropout layers of one model draw different masks") {
  Sequential<Dense<4, 256>, Dropout, Dropout> model(1, {}, Dropout{0.5f}, Dropout{0.5f});
  decltype(model)::Workspace<CpuBackend> ws(4);
  Matrix const x = random_matrix(4, 4, 2) + Matrix::Constant(4, 4, 3.0f);
  model.forward(ws, model.parameters().data(), view(x), {.training = true, .seed = 7, .first_sample = 0});
  auto const out = detail::eigen(ws.output());
  double const kept = double((out.array() != 0.0f).count()) / double(out.size());
  CHECK(kept == doctest::Approx(0.25).epsilon(0.2));  // independent masks keep a quarter; one mask twice keeps half
}

TEST_CASE("SelfAttention and Bert check their configuration and name their parameters") {
  using Attention = SelfAttention<8, 2>;
  Rng rng(1);
  std::vector<float> p(Attention::parameter_count(8));
  CHECK_THROWS_AS(Attention{1.0f}.initialize(p.data(), 8, rng), ConfigError);
  auto const names = Attention::parameter_tensors(8);
  REQUIRE(names.size() == 8);
  CHECK(names[6].name == "output/kernel");
  CHECK(names[7].offset == 3 * (64 + 8) + 64);
  CHECK(TinyBert::name() == "Bert<2, 8, 2, 12, 23, 6>");
  CHECK(TinyClassifier::columns == std::array<int, 4>{1, 6, 1, 1});
}

// The image layers (nn/conv.hpp): central differences through them, with each padding, an
// even kernel and strides; a direct convolution, a direct max and direct means written out
// as the forward's oracle; Keras' names and shapes for checkpoints.
namespace {
// y(oh, ow, f) = b(f) + sum over (kh, kw, c) of w(kh, kw, c, f) x(oh * stride + kh * dilation
// - top, ow * stride + kw * dilation - left, c), zero outside the image; w as Keras stores it,
// (kh, kw, c, f) row-major.
Matrix direct_convolution(nn::ImageShape in, int filters, int kernel, int top, int left, int stride, int out_h,
                          int out_w, float const* w, float const* b, Matrix const& x, int dilation = 1) {
  Matrix y(out_h * out_w * filters, x.cols());
  for (Eigen::Index s = 0; s < x.cols(); ++s)
    for (int oh = 0; oh < out_h; ++oh)
      for (int ow = 0; ow < out_w; ++ow)
        for (int f = 0; f < filters; ++f) {
          double sum = b[f];
          for (int kh = 0; kh < kernel; ++kh)
            for (int kw = 0; kw < kernel; ++kw)
              for (int c = 0; c < in.channels; ++c) {
                int const ih = oh * stride + kh * dilation - top, iw = ow * stride + kw * dilation - left;
                if (ih < 0 || ih >= in.height || iw < 0 || iw >= in.width) continue;
                sum += double(w[((kh * kernel + kw) * in.channels + c) * filters + f]) *
                       double(x((ih * in.width + iw) * in.channels + c, s));
              }
          y((oh * out_w + ow) * filters + f, s) = float(sum);
        }
  return y;
}

// Conv2D layer L on images `in` (columns of x), with random weights and biases, against the
// direct convolution with the given kernel, stride, padding before and dilation. Then its
// backward against the adjoint identities of the map x, w -> conv(x, w) (linear in each): with
// the biases zero and any dy, sum(dy * y) = sum(dx * x) = sum(dw * w), which holds only where
// the scatter puts each patch value back where the gather took it and the weight gradient
// pairs the same values.
template <class L>
void check_direct_convolution(Rng& rng, nn::ImageShape in, Matrix const& x, int kernel, int stride, int top, int left,
                              int dilation = 1) {
  CAPTURE(L::name());
  Sequential<L> layer(6);
  auto p = layer.parameters();
  for (float& v : p) v = 2.0f * rng.uniform() - 1.0f;
  constexpr auto out = L::output_shape;
  Matrix const direct = direct_convolution(in, out.channels, kernel, top, left, stride, out.height, out.width, p.data(),
                                           p.data() + L::kernel_size, x, dilation);
  Matrix const got = layer.predict(x);
  REQUIRE(got.rows() == direct.rows());
  CHECK(((got - direct).array().abs() <= 1e-5f * (1.0f + direct.array().abs())).all());

  std::fill(p.begin() + std::ptrdiff_t(L::kernel_size), p.end(), 0.0f);
  Matrix const y = layer.predict(x);
  Matrix dy(y.rows(), y.cols()), dx = Matrix::Constant(x.rows(), x.cols(), std::numeric_limits<float>::quiet_NaN());
  for (float& v : dy.reshaped()) v = 2.0f * rng.uniform() - 1.0f;
  std::vector<float> dw(p.size(), std::numeric_limits<float>::quiet_NaN());
  Matrix patches(L::patch_rows * L::pixels, x.cols());
  MatrixView const scratch[] = {view(patches)};
  L{}.template backward<CpuBackend>(p.data(), dw.data(), view(x), view(y), scratch, view(dy), view(dx), false);
  double const output = (dy.cast<double>().array() * y.cast<double>().array()).sum();
  double const input = (dx.cast<double>().array() * x.cast<double>().array()).sum();
  double weights = 0.0;
  for (std::size_t i = 0; i < L::kernel_size; ++i) weights += double(dw[i]) * double(p[i]);
  double const scale = (dy.cast<double>().cwiseAbs().array() * y.cast<double>().cwiseAbs().array()).sum();
  CHECK(std::abs(input - output) <= 1e-5 * scale);
  CHECK(std::abs(weights - output) <= 1e-5 * scale);
  std::vector<double> bias(std::size_t(out.channels), 0.0);  // the bias gradient: dy summed over the pixels
  for (Eigen::Index i = 0; i < dy.size(); ++i) bias[std::size_t(i % out.channels)] += double(dy.reshaped()(i));
  for (std::size_t f = 0; f < bias.size(); ++f) CHECK(dw[L::kernel_size + f] == doctest::Approx(bias[f]).epsilon(1e-5));
}

// MaxPool2D layer Max and AveragePooling2D layer Average, of the same windows over images
// `in` (columns of x), against y and dx written out window by window: a window's pixels are
// those of its pool x pool square (starting `top` rows above and `left` columns left of the
// image under `same`) that lie inside the image; the first largest value (row order) takes
// the window's dy, each of its pixels dy / their number, summed over the windows. The
// layers' dx starts as NaN, so a pixel they leave unwritten fails.
template <class Max, class Average>
void check_direct_pooling(nn::ImageShape in, Matrix const& x, int pool, int stride, int top, int left) {
  CAPTURE(Max::name());
  constexpr auto out = Max::output_shape;
  static_assert(Average::output_shape.size() == out.size());
  int const c = in.channels;
  Matrix const dy = random_matrix(out.size(), int(x.cols()), 40);
  Matrix max_y(out.size(), x.cols()), mean_y(out.size(), x.cols());
  Matrix max_dx = Matrix::Zero(x.rows(), x.cols()), mean_dx = max_dx;
  for (Eigen::Index s = 0; s < x.cols(); ++s)
    for (int oh = 0; oh < out.height; ++oh)
      for (int ow = 0; ow < out.width; ++ow)
        for (int k = 0; k < c; ++k) {
          int const o = (oh * out.width + ow) * c + k;
          std::vector<int> pixels;
          for (int ph = 0; ph < pool; ++ph)
            for (int pw = 0; pw < pool; ++pw) {
              int const h = oh * stride + ph - top, w = ow * stride + pw - left;
              if (h >= 0 && h < in.height && w >= 0 && w < in.width) pixels.push_back((h * in.width + w) * c + k);
            }
          REQUIRE(!pixels.empty());
          int best = pixels[0];
          double sum = 0.0;
          for (int at : pixels) {
            if (x(at, s) > x(best, s)) best = at;
            sum += double(x(at, s));
            mean_dx(at, s) += dy(o, s) / float(pixels.size());
          }
          max_y(o, s) = x(best, s);
          max_dx(best, s) += dy(o, s);
          mean_y(o, s) = float(sum / double(pixels.size()));
        }
  Matrix got(out.size(), x.cols()), dx = Matrix::Constant(x.rows(), x.cols(), std::numeric_limits<float>::quiet_NaN());
  Max{}.template forward<CpuBackend>(nullptr, view(x), view(got), {}, {});
  CHECK(got == max_y);
  Max{}.template backward<CpuBackend>(nullptr, nullptr, view(x), view(got), {}, view(dy), view(dx), false);
  CHECK((dx - max_dx).cwiseAbs().maxCoeff() <= 1e-6f);
  Average{}.template forward<CpuBackend>(nullptr, view(x), view(got), {}, {});
  CHECK((got - mean_y).cwiseAbs().maxCoeff() <= 1e-6f);
  dx.setConstant(std::numeric_limits<float>::quiet_NaN());
  Average{}.template backward<CpuBackend>(nullptr, nullptr, view(x), view(got), {}, view(dy), view(dx), false);
  CHECK((dx - mean_dx).cwiseAbs().maxCoeff() <= 1e-6f);
}
}  // namespace

TEST_CASE("Conv2D's and MaxPool2D's backward match central differences") {
  using Valid = Conv2D<ImageShape{6, 5, 2}, 3, 3>;  // 4 x 3 x 3
  static_assert(Valid::output_shape.height == 4 && Valid::output_shape.width == 3 && Valid::output_shape.channels == 3);
  using Pool = MaxPool2D<Valid::output_shape, 2>;  // 2 x 1 x 3: the last row of windows is dropped
  static_assert(Pool::output_shape.size() == 6);
  Sequential<Valid, Tanh, Pool, Dense<6, 4>> valid(21);
  check_gradients(valid, random_matrix(60, 5, 1), labels({0, 1, 2, 3, 0}), SoftmaxCrossEntropy{}, {});

  // `same` with an odd and an even kernel (one row of zeros before, the rest after), a
  // convolution after a pool, the first layer's input gradient never asked for.
  using Same = Conv2D<ImageShape{5, 4, 2}, 3, 3, Padding::same>;
  static_assert(Same::output_shape.height == 5 && Same::output_shape.width == 4);
  using Even = Conv2D<MaxPool2D<Same::output_shape, 2>::output_shape, 2, 2, Padding::same>;
  Sequential<Same, Relu, MaxPool2D<Same::output_shape, 2>, Even, Tanh, Dense<Even::output_shape.size(), 3>> same(22);
  check_gradients(same, random_matrix(40, 4, 2), labels({0, 1, 2, 1}), SoftmaxCrossEntropy{}, {});

  // Windows that cover the image whole (no row or column dropped).
  Sequential<Conv2D<ImageShape{4, 4, 2}, 3, 3, Padding::same>, Tanh, MaxPool2D<ImageShape{4, 4, 3}, 2>, Dense<12, 3>> whole(23);
  check_gradients(whole, random_matrix(32, 4, 3), labels({0, 1, 2, 1}), SoftmaxCrossEntropy{}, {});
}

TEST_CASE("Conv2D and MaxPool2D compute a direct convolution and a direct max") {
  using Conv = Conv2D<ImageShape{7, 6, 3}, 4, 3, Padding::same>;
  using Pool = MaxPool2D<Conv::output_shape, 3>;  // 2 x 2 x 4 windows of 3 x 3
  Sequential<Conv, Pool> model(5);
  auto params = model.parameters();
  Rng rng(8);
  for (float& p : params) p = 2.0f * rng.uniform() - 1.0f;  // biases too, not only zeros
  Matrix const x = random_matrix(7 * 6 * 3, 9, 3);
  Matrix const conv = direct_convolution({7, 6, 3}, 4, 3, 1, 1, 1, 7, 6, params.data(), params.data() + 3 * 3 * 3 * 4, x);

  Sequential<Conv> alone(5);
  std::copy(params.begin(), params.end(), alone.parameters().begin());
  Matrix const got = alone.predict(x);
  REQUIRE(got.rows() == conv.rows());
  CHECK(((got - conv).array().abs() <= 1e-5f * (1.0f + conv.array().abs())).all());

  Matrix pooled(2 * 2 * 4, x.cols());
  for (Eigen::Index s = 0; s < x.cols(); ++s)
    for (int oh = 0; oh < 2; ++oh)
      for (int ow = 0; ow < 2; ++ow)
        for (int f = 0; f < 4; ++f) {
          float m = -std::numeric_limits<float>::infinity();
          for (int ph = 0; ph < 3; ++ph)
            for (int pw = 0; pw < 3; ++pw) m = std::max(m, got(((oh * 3 + ph) * 6 + ow * 3 + pw) * 4 + f, s));
          pooled((oh * 2 + ow) * 4 + f, s) = m;
        }
  CHECK(model.predict(x) == pooled);  // the max of the same convolution's values: exact

  // An even kernel under `same` pads (kernel - 1) / 2 = 0 before and 1 after, as Keras does;
  // `valid` pads nothing.
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 2, 2, Padding::same>>(rng, {7, 6, 3}, x, 2, 1, 0, 0);
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 5, 4, Padding::same>>(rng, {7, 6, 3}, x, 4, 1, 1, 1);
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 2, 4>>(rng, {7, 6, 3}, x, 4, 1, 0, 0);
}

TEST_CASE("Conv2D with a stride: Keras' output sizes and padding, a direct convolution, central differences") {
  // Keras: `valid` gives floor((size - kernel) / stride) + 1; `same` gives ceil(size / stride),
  // padded with max((out - 1) * stride + kernel - size, 0) zeros, half (rounded down) before.
  static_assert(nn::conv_extent(7, 3, 2, Padding::valid).size == 3);
  static_assert(nn::conv_extent(8, 3, 2, Padding::valid).size == 3);
  static_assert(nn::conv_extent(28, 3, 2, Padding::same).size == 14 && nn::conv_extent(28, 3, 2, Padding::same).before == 0);
  static_assert(nn::conv_extent(7, 3, 2, Padding::same).size == 4 && nn::conv_extent(7, 3, 2, Padding::same).before == 1);
  static_assert(nn::conv_extent(6, 4, 2, Padding::same).size == 3 && nn::conv_extent(6, 4, 2, Padding::same).before == 1);
  static_assert(nn::conv_extent(5, 2, 3, Padding::same).size == 2 && nn::conv_extent(5, 2, 3, Padding::same).before == 0);
  // Stride 1 under `same` keeps the padding it had: (kernel - 1) / 2 before.
  static_assert(nn::conv_extent(9, 4, 1, Padding::same).size == 9 && nn::conv_extent(9, 4, 1, Padding::same).before == 1);

  Rng rng(31);
  Matrix const x = random_matrix(7 * 6 * 3, 5, 32);
  // Each layer's predictions against the direct convolution with its padding and stride.
  ImageShape const in{7, 6, 3};
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 4, 3, Padding::valid, 2>>(rng, in, x, 3, 2, 0, 0);  // 3 x 2
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 4, 3, Padding::same, 2>>(rng, in, x, 3, 2, 1, 0);   // 4 x 3
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 2, 4, Padding::same, 2>>(rng, in, x, 4, 2, 1, 1);   // even kernel
  // A stride past the kernel (pixels skipped), and a 1 x 1 kernel that subsamples.
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 2, 2, Padding::valid, 3>>(rng, in, x, 2, 3, 0, 0);
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 3, 1, Padding::same, 2>>(rng, in, x, 1, 2, 0, 0);
  static_assert(Conv2D<ImageShape{7, 6, 3}, 4, 3, Padding::same, 2>::output_shape.height == 4);
  static_assert(Conv2D<ImageShape{7, 6, 3}, 4, 3, Padding::same, 2>::output_shape.width == 3);
  CHECK(Conv2D<ImageShape{28, 28, 1}, 32, 3, Padding::same, 2>::name() == "Conv2D<28x28x1, 32, 3x3, stride 2, same>");

  // Backward through overlapping windows (stride < kernel, each pixel in several patches),
  // skipped pixels (stride > kernel) and `same` padding on a non-square image.
  using Overlap = Conv2D<ImageShape{7, 6, 2}, 3, 3, Padding::same, 2>;  // 4 x 3 x 3
  using Skip = Conv2D<Overlap::output_shape, 2, 1, Padding::valid, 2>;  // 2 x 2 x 2
  Sequential<Overlap, Tanh, Skip, Tanh, Dense<Skip::output_shape.size(), 3>> strided(24);
  check_gradients(strided, random_matrix(7 * 6 * 2, 4, 33), labels({0, 1, 2, 1}), SoftmaxCrossEntropy{}, {});
  using Valid = Conv2D<ImageShape{6, 7, 2}, 2, 2, Padding::valid, 3>;  // 2 x 2 x 2, the last row and column unread
  Sequential<Valid, Tanh, Dense<Valid::output_shape.size(), 3>> valid(25);
  check_gradients(valid, random_matrix(6 * 7 * 2, 4, 34), labels({2, 1, 0, 1}), SoftmaxCrossEntropy{}, {});
}

TEST_CASE("Conv2D with a dilation: Keras' output sizes and padding, a direct convolution, central differences") {
  // A kernel dilated by d spans (kernel - 1) * d + 1 pixels, and Keras sizes and pads by that
  // span: `valid` 7 - 5 + 1 = 3 rows for a 3-tap kernel dilated by 2; `same` pads 4 rows, 2 before.
  using Valid = Conv2D<ImageShape{7, 6, 3}, 4, 3, Padding::valid, 1, 2>;
  static_assert(Valid::extent == 5 && Valid::output_shape.height == 3 && Valid::output_shape.width == 2);
  using Same = Conv2D<ImageShape{7, 6, 3}, 4, 3, Padding::same, 1, 2>;
  static_assert(Same::output_shape.height == 7 && Same::output_shape.width == 6);
  static_assert(Same::windows.top == 2 && Same::windows.left == 2 && Same::windows.dilation == 2);
  CHECK(Same::name() == "Conv2D<7x6x3, 4, 3x3, dilation 2, same>");

  Rng rng(43);
  Matrix const x = random_matrix(7 * 6 * 3, 5, 44);
  ImageShape const in{7, 6, 3};
  check_direct_convolution<Valid>(rng, in, x, 3, 1, 0, 0, 2);
  check_direct_convolution<Same>(rng, in, x, 3, 1, 2, 2, 2);
  // An even kernel dilated by 3 (span 4: 3 rows of padding, 1 before), a dilation past the
  // image's half (taps on either side of it), and a dilation with a stride (which Keras
  // refuses, PyTorch and strata compute).
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 2, 2, Padding::same, 1, 3>>(rng, in, x, 2, 1, 1, 1, 3);
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 3, 2, Padding::valid, 1, 4>>(rng, in, x, 2, 1, 0, 0, 4);
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 3, 3, Padding::same, 2, 2>>(rng, in, x, 3, 2, 2, 1, 2);
  check_direct_convolution<Conv2D<ImageShape{7, 6, 3}, 2, 3, Padding::same, 1, 5>>(rng, in, x, 3, 1, 5, 5, 5);
  static_assert(Conv2D<ImageShape{7, 6, 3}, 3, 3, Padding::same, 2, 2>::output_shape.height == 4);
  static_assert(Conv2D<ImageShape{7, 6, 3}, 2, 3, Padding::same, 1, 5>::windows.top == 5);

  // Backward through two dilated layers, the second on the first's output.
  using First = Conv2D<ImageShape{7, 6, 2}, 3, 3, Padding::same, 1, 2>;   // 7 x 6 x 3
  using Second = Conv2D<First::output_shape, 2, 2, Padding::valid, 1, 3>;  // 4 x 3 x 2
  static_assert(Second::output_shape.height == 4 && Second::output_shape.width == 3);
  Sequential<First, Tanh, Second, Tanh, Dense<Second::output_shape.size(), 3>> dilated(29);
  check_gradients(dilated, random_matrix(7 * 6 * 2, 4, 45), labels({0, 1, 2, 1}), SoftmaxCrossEntropy{}, {});
}

TEST_CASE("pooling with `same` padding: Keras' sizes, direct maxima and means over the pixels inside the image") {
  // ceil(size / stride) windows, the padding split as a convolution's; the windows tile the
  // image (the valid path, written whole) only where nothing is padded.
  static_assert(nn::pool_windows({7, 6, 3}, 2, 2, Padding::same).rows == 4);
  static_assert(nn::pool_windows({7, 6, 3}, 2, 2, Padding::same).top == 0);      // 1 row padded, after
  static_assert(nn::pool_windows({7, 6, 3}, 3, 2, Padding::same).top == 1);      // 2 rows padded, 1 before
  static_assert(nn::pool_windows({7, 6, 3}, 3, 2, Padding::same).columns == 3);
  static_assert(nn::pool_windows({7, 6, 3}, 3, 2, Padding::same).left == 0);     // 1 column padded, after
  static_assert(nn::pool_windows({7, 6, 3}, 3, 1, Padding::same).rows == 7);
  static_assert(nn::pool_windows({8, 6, 3}, 2, 2, Padding::same).tiles({8, 6, 3}));
  static_assert(!nn::pool_windows({7, 6, 3}, 2, 2, Padding::same).tiles({7, 6, 3}));
  static_assert(nn::pool_windows({8, 6, 3}, 2, 2, Padding::valid).tiles({8, 6, 3}));
  static_assert(!nn::pool_windows({7, 6, 3}, 2, 2, Padding::valid).tiles({7, 6, 3}));  // the last row dropped
  using Odd = MaxPool2D<ImageShape{7, 6, 3}, 2, 2, Padding::same>;  // 4 x 3
  static_assert(Odd::output_shape.height == 4 && Odd::output_shape.width == 3);
  CHECK(Odd::name() == "MaxPool2D<7x6x3, 2, same>");
  CHECK(AveragePooling2D<ImageShape{7, 6, 3}, 3, 1, Padding::same>::name() == "AveragePooling2D<7x6x3, 3, stride 1, same>");

  Matrix const x = random_matrix(7 * 6 * 3, 4, 46);
  ImageShape const in{7, 6, 3};
  check_direct_pooling<Odd, AveragePooling2D<ImageShape{7, 6, 3}, 2, 2, Padding::same>>(in, x, 2, 2, 0, 0);
  check_direct_pooling<MaxPool2D<ImageShape{7, 6, 3}, 3, 2, Padding::same>,
                       AveragePooling2D<ImageShape{7, 6, 3}, 3, 2, Padding::same>>(in, x, 3, 2, 1, 0);
  check_direct_pooling<MaxPool2D<ImageShape{7, 6, 3}, 3, 1, Padding::same>,
                       AveragePooling2D<ImageShape{7, 6, 3}, 3, 1, Padding::same>>(in, x, 3, 1, 1, 1);
  // A window wider than the image (only `same` allows it) and one with gaps between windows.
  check_direct_pooling<MaxPool2D<ImageShape{7, 6, 3}, 8, 4, Padding::same>,
                       AveragePooling2D<ImageShape{7, 6, 3}, 8, 4, Padding::same>>(in, x, 8, 4, 2, 3);
  check_direct_pooling<MaxPool2D<ImageShape{7, 6, 3}, 2, 3, Padding::same>,
                       AveragePooling2D<ImageShape{7, 6, 3}, 2, 3, Padding::same>>(in, x, 2, 3, 0, 0);
  // With nothing padded, `same` is `valid`, bit for bit.
  Matrix const even = random_matrix(8 * 6 * 3, 4, 47);
  CHECK(Sequential<MaxPool2D<ImageShape{8, 6, 3}, 2, 2, Padding::same>>(1).predict(even) ==
        Sequential<MaxPool2D<ImageShape{8, 6, 3}, 2>>(1).predict(even));

  // Through a model: central differences through padded windows of both kinds.
  using Conv = Conv2D<ImageShape{7, 6, 2}, 3, 2, Padding::same>;                  // 7 x 6 x 3
  using Max = MaxPool2D<Conv::output_shape, 3, 2, Padding::same>;                 // 4 x 3 x 3
  using Average = AveragePooling2D<Max::output_shape, 2, 2, Padding::same>;       // 2 x 2 x 3, a column padded
  static_assert(Average::output_shape.height == 2 && Average::output_shape.width == 2);
  Sequential<Conv, Tanh, Max, Average, Dense<Average::output_shape.size(), 3>> model(30);
  check_gradients(model, random_matrix(7 * 6 * 2, 4, 48), labels({2, 0, 1, 1}), SoftmaxCrossEntropy{}, {});
}

TEST_CASE("AveragePooling2D and GlobalAveragePooling2D compute direct means and their backward matches central differences") {
  Matrix const x = random_matrix(5 * 7 * 3, 4, 35);
  using Pool = AveragePooling2D<ImageShape{5, 7, 3}, 2>;  // 2 x 3 x 3: the last row and column dropped
  static_assert(Pool::output_shape.height == 2 && Pool::output_shape.width == 3 && Pool::output_shape.channels == 3);
  using Global = GlobalAveragePooling2D<ImageShape{5, 7, 3}>;
  static_assert(Global::output_shape.size() == 3);
  Matrix const pooled = Sequential<Pool>(1).predict(x), global = Sequential<Global>(1).predict(x);
  REQUIRE(pooled.rows() == 2 * 3 * 3);
  REQUIRE(global.rows() == 3);
  for (Eigen::Index s = 0; s < x.cols(); ++s)
    for (int c = 0; c < 3; ++c) {
      double whole = 0.0;
      for (int p = 0; p < 5 * 7; ++p) whole += double(x(p * 3 + c, s));
      CHECK(global(c, s) == doctest::Approx(whole / 35.0).epsilon(1e-6));
      for (int oh = 0; oh < 2; ++oh)
        for (int ow = 0; ow < 3; ++ow) {
          double sum = 0.0;
          for (int ph = 0; ph < 2; ++ph)
            for (int pw = 0; pw < 2; ++pw) sum += double(x(((oh * 2 + ph) * 7 + ow * 2 + pw) * 3 + c, s));
          CHECK(pooled((oh * 3 + ow) * 3 + c, s) == doctest::Approx(sum / 4.0).epsilon(1e-6));
        }
    }
  // Backward: each output's dy / 4 at the four pixels of its window, dy / 35 everywhere for
  // the global mean, zero in the row and column no window covers (dx starts as NaN).
  Matrix const dy = random_matrix(2 * 3 * 3, 4, 37), dg = random_matrix(3, 4, 38);
  Matrix dx = Matrix::Constant(x.rows(), x.cols(), std::numeric_limits<float>::quiet_NaN()), dxg = dx;
  Pool{}.backward<CpuBackend>(nullptr, nullptr, view(x), view(pooled), {}, view(dy), view(dx), false);
  Global{}.backward<CpuBackend>(nullptr, nullptr, view(x), view(global), {}, view(dg), view(dxg), false);
  for (Eigen::Index s = 0; s < x.cols(); ++s)
    for (int h = 0; h < 5; ++h)
      for (int w = 0; w < 7; ++w)
        for (int c = 0; c < 3; ++c) {
          int const at = (h * 7 + w) * 3 + c;
          float const expected = h < 4 && w < 6 ? dy(((h / 2) * 3 + w / 2) * 3 + c, s) * 0.25f : 0.0f;
          CHECK(dx(at, s) == expected);
          CHECK(dxg(at, s) == dg(c, s) * (1.0f / 35.0f));
        }
  CHECK(Pool::name() == "AveragePooling2D<5x7x3, 2>");
  CHECK(Global::name() == "GlobalAveragePooling2D<5x7x3>");

  // Through a convolution on either side, dropped rows and columns included (their gradient is zero).
  using Conv = Conv2D<ImageShape{7, 6, 2}, 3, 2>;  // 6 x 5 x 3
  using Average = AveragePooling2D<Conv::output_shape, 2>;  // 3 x 2 x 3: the last column dropped
  using Next = Conv2D<Average::output_shape, 4, 2, Padding::same>;
  Sequential<Conv, Tanh, Average, Next, Tanh, GlobalAveragePooling2D<Next::output_shape>, Dense<4, 3>> model(26);
  check_gradients(model, random_matrix(7 * 6 * 2, 4, 36), labels({0, 2, 1, 1}), SoftmaxCrossEntropy{}, {});
}

TEST_CASE("pooling windows with a stride: direct maxima and means, their gradients summed where windows overlap") {
  Matrix const x = random_matrix(7 * 6 * 3, 4, 39);
  // Keras' `valid`: floor((size - pool) / stride) + 1 windows.
  using MaxOverlap = MaxPool2D<ImageShape{7, 6, 3}, 3, 2>;          // 3 x 2: overlapping by a row and a column
  using AverageOverlap = AveragePooling2D<ImageShape{7, 6, 3}, 3, 2>;
  using MaxGaps = MaxPool2D<ImageShape{7, 6, 3}, 2, 3>;             // 2 x 2: a row and a column between windows
  using AverageGaps = AveragePooling2D<ImageShape{7, 6, 3}, 2, 3>;
  static_assert(MaxOverlap::output_shape.height == 3 && MaxOverlap::output_shape.width == 2);
  static_assert(MaxGaps::output_shape.height == 2 && MaxGaps::output_shape.width == 2);
  CHECK(MaxOverlap::name() == "MaxPool2D<7x6x3, 3, stride 2>");
  CHECK(AverageGaps::name() == "AveragePooling2D<7x6x3, 2, stride 3>");

  check_direct_pooling<MaxOverlap, AverageOverlap>({7, 6, 3}, x, 3, 2, 0, 0);
  check_direct_pooling<MaxGaps, AverageGaps>({7, 6, 3}, x, 2, 3, 0, 0);

  // Through a model, split over samples by the intra-op team as the trainer splits them.
  using Conv = Conv2D<ImageShape{7, 6, 2}, 3, 2, Padding::same>;  // 7 x 6 x 3
  using Max = MaxPool2D<Conv::output_shape, 3, 2>;                // 3 x 2 x 3
  using Average = AveragePooling2D<ImageShape{7, 6, 3}, 3, 2>;
  Sequential<Conv, Tanh, Max, Dense<Max::output_shape.size(), 3>> max_model(27);
  check_gradients(max_model, random_matrix(7 * 6 * 2, 4, 41), labels({0, 2, 1, 1}), SoftmaxCrossEntropy{}, {});
  Sequential<Conv, Tanh, Average, Dense<Average::output_shape.size(), 3>> average_model(28);
  check_gradients(average_model, random_matrix(7 * 6 * 2, 4, 42), labels({1, 2, 0, 1}), SoftmaxCrossEntropy{}, {});
}

TEST_CASE("MaxPool2D passes a tie's gradient to the first largest value and propagates NaN") {
  using Pool = MaxPool2D<ImageShape{2, 2, 1}, 2>;
  Pool const pool;
  Matrix x(4, 2);
  x << 1.0f, 3.0f,                                     // sample 0: 1, 5, 5, 2 (a tie at 1 and 2)
      5.0f, std::numeric_limits<float>::quiet_NaN(),   // sample 1: 3, NaN, 7, 7
      5.0f, 7.0f,
      2.0f, 7.0f;
  Matrix y(1, 2), dx(4, 2);
  Matrix const dy = Matrix::Constant(1, 2, 0.5f);
  pool.forward<CpuBackend>(nullptr, view(x), view(y), {}, {});
  CHECK(y(0, 0) == 5.0f);
  CHECK(std::isnan(y(0, 1)));
  pool.backward<CpuBackend>(nullptr, nullptr, view(x), view(y), {}, view(dy), view(dx), false);
  CHECK(dx.col(0) == Vector{{0.0f, 0.5f, 0.0f, 0.0f}});
  CHECK(dx.col(1) == Vector{{0.0f, 0.5f, 0.0f, 0.0f}});
}

TEST_CASE("Conv2D names its kernel and bias as Keras shapes them") {
  using Model = Sequential<Conv2D<ImageShape{28, 28, 1}, 32, 3>, Relu, MaxPool2D<ImageShape{26, 26, 32}, 2>,
                           Dense<13 * 13 * 32, 10>>;
  auto const tensors = Model::parameter_tensors();
  REQUIRE(tensors.size() == 4);
  CHECK(tensors[0].name == "conv2d_0/kernel");
  CHECK(tensors[0].shape == std::vector<std::int64_t>{3, 3, 1, 32});
  CHECK(tensors[1].name == "conv2d_0/bias");
  CHECK(tensors[1].offset == 3 * 3 * 32);
  CHECK(tensors[2].name == "dense_3/kernel");
  CHECK(Model::parameter_count == 3 * 3 * 32 + 32 + 13 * 13 * 32 * 10 + 10);
  CHECK(Conv2D<ImageShape{28, 28, 1}, 32, 3>::name() == "Conv2D<28x28x1, 32, 3x3, valid>");
  CHECK(MaxPool2D<ImageShape{26, 26, 32}, 2>::name() == "MaxPool2D<26x26x32, 2>");
  // Glorot's limit with Keras' fans for a convolution: sqrt(6 / (9 * 1 + 9 * 32)).
  Model const model(3);
  float const limit = std::sqrt(6.0f / float(9 + 9 * 32));
  auto const kernel = model.parameters().subspan(0, 3 * 3 * 32);
  CHECK(std::all_of(kernel.begin(), kernel.end(), [&](float w) { return std::abs(w) <= limit; }));
  CHECK(*std::max_element(kernel.begin(), kernel.end()) > 0.8f * limit);
}
