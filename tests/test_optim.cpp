// Optimizers against hand-computed steps (in double), and slice independence.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "strata.hpp"

using namespace strata;

static_assert(optim::Optimizer<Sgd> && optim::Optimizer<Adam> && optim::Optimizer<AdamW>);

namespace {
// Runs `steps` updates with the same gradient sequence g_t = g * t on a 3-element arena.
template <class O>
std::vector<float> run(O const& optimizer, int steps) {
  std::vector<float> w{1.0f, -2.0f, 0.5f};
  std::vector<float> g(3);
  auto state = optimizer.make_state(3);
  for (int t = 1; t <= steps; ++t) {
    g = {0.1f * float(t), -0.3f * float(t), 0.0f};
    optimizer.update(std::span<float>(w), std::span<float const>(g), state, 0, t);
  }
  return w;
}
}  // namespace

TEST_CASE("Sgd: plain, momentum and Nesterov follow Keras' formulas") {
  auto plain = run(Sgd{.lr = 0.1f}, 2);
  CHECK(plain[0] == doctest::Approx(1.0 - 0.1 * 0.1 - 0.1 * 0.2));
  // momentum: v1 = -lr g1, w1 = w0 + v1; v2 = m v1 - lr g2, w2 = w1 + v2.
  double v = -0.1 * 0.1, w = 1.0 + v;
  v = 0.9 * v - 0.1 * 0.2;
  w += v;
  CHECK(run(Sgd{.lr = 0.1f, .momentum = 0.9f}, 2)[0] == doctest::Approx(w));
  // Nesterov: w += m v - lr g with the new v.
  double vn = -0.1 * 0.1, wn = 1.0 + 0.9 * vn - 0.1 * 0.1;
  vn = 0.9 * vn - 0.1 * 0.2;
  wn += 0.9 * vn - 0.1 * 0.2;
  CHECK(run(Sgd{.lr = 0.1f, .momentum = 0.9f, .nesterov = true}, 2)[0] == doctest::Approx(wn));
}

TEST_CASE("Adam and AdamW follow Keras' formulas, with bias correction") {
  double const lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-7, decay = 0.1;
  for (bool decoupled : {false, true}) {
    double w = -2.0, m = 0, v = 0;
    for (int t = 1; t <= 3; ++t) {
      double const g = -0.3 * t;
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      double const step = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
      w = (decoupled ? (1 - lr * decay) * w : w) - step * m / (std::sqrt(v) + eps);
    }
    auto got = decoupled ? run(AdamW{.lr = 0.01f, .weight_decay = 0.1f}, 3) : run(Adam{.lr = 0.01f}, 3);
    CHECK(got[1] == doctest::Approx(w).epsilon(1e-6));
    // A zero gradient leaves Adam's weight where it is; AdamW still decays it.
    CHECK(got[2] == doctest::Approx(decoupled ? 0.5 * std::pow(1 - lr * decay, 3) : 0.5));
  }
}

TEST_CASE_TEMPLATE("updating slices separately equals updating the whole arena", O, Sgd, Adam, AdamW) {
  O optimizer{};
  if constexpr (std::is_same_v<O, Sgd>) optimizer.momentum = 0.9f;
  std::vector<float> whole(100), parts(100), g(100);
  for (int i = 0; i < 100; ++i) {
    whole[std::size_t(i)] = parts[std::size_t(i)] = std::sin(float(i));
    g[std::size_t(i)] = std::cos(float(i));
  }
  auto s1 = optimizer.make_state(100), s2 = optimizer.make_state(100);
  for (int t = 1; t <= 3; ++t) {
    optimizer.update(std::span<float>(whole), std::span<float const>(g), s1, 0, t);
    optimizer.update(std::span<float>(parts).subspan(0, 37), std::span<float const>(g).subspan(0, 37), s2, 0, t);
    optimizer.update(std::span<float>(parts).subspan(37), std::span<float const>(g).subspan(37), s2, 37, t);
  }
  CHECK(whole == parts);
}

TEST_CASE("hyper-parameters that cannot work are rejected with the value") {
  CHECK_THROWS_WITH_AS(Sgd{.lr = -1.0f}.validate(), "Sgd: lr -1 must be a positive finite number", ConfigError);
  CHECK_THROWS_AS(Sgd{.momentum = 1.0f}.validate(), ConfigError);
  CHECK_THROWS_AS(Adam{.beta1 = 1.0f}.validate(), ConfigError);
  CHECK_THROWS_AS(AdamW{.weight_decay = -0.1f}.validate(), ConfigError);
  CHECK_NOTHROW(Adam{}.validate());
}
