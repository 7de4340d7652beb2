// Optimizers against hand-computed steps (in double), slice independence, schedules, and
// the trainer's whole-gradient steps (Lamb's trust ratio, clipping by the global norm,
// weight-decay exclusions) against a single-replica oracle computed here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "strata.hpp"
#include "user_optimizer.hpp"

using namespace strata;

static_assert(optim::Optimizer<Sgd> && optim::Optimizer<Adam> && optim::Optimizer<AdamW> && optim::Optimizer<Lamb>);
static_assert(optim::LayerwiseOptimizer<Lamb> && !optim::LayerwiseOptimizer<Adam>);
static_assert(optim::LayerwiseOptimizer<optim::Scheduled<Lamb, CosineDecay>>);
// Every optimizer strata ships, a scheduled one and a user's own have an element rule: the
// one copy of their arithmetic that the Cuda device compiles too.
static_assert(optim::ElementwiseOptimizer<Sgd> && optim::ElementwiseOptimizer<Adam> &&
              optim::ElementwiseOptimizer<AdamW> && optim::ElementwiseOptimizer<user::Rmsprop> &&
              optim::ElementwiseOptimizer<optim::Scheduled<Adam, CosineDecay>>);
static_assert(optim::LayerwiseRuleOptimizer<Lamb> && optim::LayerwiseRuleOptimizer<optim::Scheduled<Lamb, CosineDecay>>);
static_assert(optim::takes_slots<optim::SgdRule, 0> && optim::takes_slots<optim::SgdRule, 1> &&
              !optim::takes_slots<optim::SgdRule, 2> && optim::takes_slots<optim::AdamRule, 2>);

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

TEST_CASE("an element rule keeps its text, and a user's optimizer built on one follows its closed form") {
  // The text NVRTC compiles is the rule the host runs, in the user's namespace or strata's.
  CHECK(optim::rule_name<user::RmsRule> == "RmsRule");
  CHECK(optim::rule_source<user::RmsRule>.find("ms = rho * ms + (1.0f - rho) * g * g;") != std::string_view::npos);
  CHECK(optim::rule_source<optim::AdamRule>.starts_with("struct AdamRule {"));
  CHECK(optim::rule_source<optim::AdamRule>.find("sqrtf(before_root(g, m, v))") != std::string_view::npos);

  double const lr = 0.01, rho = 0.9, eps = 1e-7;
  double w = -2.0, ms = 0.0;
  for (int t = 1; t <= 3; ++t) {
    double const g = -0.3 * t;
    ms = rho * ms + (1 - rho) * g * g;
    w -= lr * g / (std::sqrt(ms) + eps);
  }
  auto const got = run(user::Rmsprop{.lr = 0.01f}, 3);
  CHECK(got[1] == doctest::Approx(w).epsilon(1e-6));
  CHECK(got[2] == 0.5f);  // a zero gradient moves nothing
}

TEST_CASE("a rule whose call operator does not match the optimizer's state is an error that names it") {
  // Adam's state has two slots (m, v); Sgd's rule takes zero or one.
  struct Mismatched : Adam {
    [[nodiscard]] optim::SgdRule rule(StepInfo) const { return {lr, 0.0f, false}; }
    void update(std::span<float> w, std::span<float const> g, State& s, std::size_t offset, StepInfo step) const {
      optim::apply_rule(rule(step), w, g, s, offset);
    }
  };
  std::vector<float> w{1.0f}, g{1.0f};
  Mismatched const opt{};
  auto state = opt.make_state(1);
  CHECK_THROWS_WITH_AS(opt.update(std::span<float>(w), std::span<float const>(g), state, 0, 1),
                       doctest::Contains("element rule SgdRule: the optimizer's state has 2 slots"), ConfigError);
  CHECK(w[0] == 1.0f);  // nothing was written
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

TEST_CASE_TEMPLATE("an update that sums one or two gradient arenas in its own loop gives the bits of summing first", O,
                   Sgd, Adam, AdamW, user::Rmsprop) {
  // The oracle: comm::reduce_range into memory, then the optimizer's update of that buffer
  // (what the step ran before the fused loop; the fallback for more than two arenas still).
  O optimizer{};
  if constexpr (std::is_same_v<O, Sgd>) optimizer.momentum = 0.9f;
  std::size_t const n = 1003;  // not a whole number of vectors: the loop's tail too
  std::vector<float> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = std::sin(float(i)) * 1e-2f;
    b[i] = std::cos(float(3 * i)) * 3e-3f;
  }
  for (int arenas : {1, 2})
    for (float scale : {1.0f, 0.5f, 1.0f / 3.0f}) {
      CAPTURE(arenas);
      CAPTURE(scale);
      std::vector<float> initial(n), summed(n);
      for (std::size_t i = 0; i < n; ++i) initial[i] = std::cos(float(i));
      std::vector<float> fused = initial, reference = initial;
      auto s1 = optimizer.make_state(n + 5), s2 = optimizer.make_state(n + 5);
      float const* const peers[2] = {a.data(), b.data()};
      for (int t = 1; t <= 3; ++t) {
        comm::reduce_range(peers, arenas, 0, n, ReduceOp::sum, scale, summed.data());
        optimizer.update(std::span<float>(reference), std::span<float const>(summed), s1, 5, t);
        optim::SummedGradient const g{a.data(), arenas == 2 ? b.data() : nullptr, scale};
        optim::apply_rule(optimizer.rule(StepInfo{t}), std::span<float>(fused), g, s2, 5);
      }
      CHECK(fused == reference);
      CHECK(fused != initial);
    }
}

// AdamRule runs on the host a block at a time, its square roots taken with vector
// instructions (optim::RootSplitRule): the same bits as the rule's call operator, one weight
// at a time with sqrtf, for any length (the blocks' and the vectors' tails) and offset.
// A one-slot rule split the same way (RMSprop's, as a user may write it).
namespace split {
STRATA_ELEMENT_RULE(RmsSplitRule, struct RmsSplitRule {
  float rate;
  float rho;
  float epsilon;
  float before_root(float g, float& ms) const {
    ms = rho * ms + (1.0f - rho) * g * g;
    return ms;
  }
  void after_root(float& w, float g, float&, float root) const { w -= rate * g / (root + epsilon); }
  void operator()(float& w, float g, float& ms) const {
    float const root = sqrtf(before_root(g, ms));
    after_root(w, g, ms, root);
  }
};)
}  // namespace split
static_assert(optim::RootSplitRule<optim::AdamRule> && optim::RootSplitRule<split::RmsSplitRule> &&
              !optim::RootSplitRule<optim::SgdRule> && !optim::RootSplitRule<user::RmsRule>);

TEST_CASE("a one-slot rule a block at a time gives the bits of its rule one weight at a time") {
  split::RmsSplitRule const rule{1e-3f, 0.9f, 1e-7f};
  for (std::size_t n : {1u, 17u, 256u, 1003u}) {
    CAPTURE(n);
    std::vector<float> w(n), g(n), ms(n);
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = std::cos(float(i));
      g[i] = std::sin(float(5 * i)) * 1e-2f;
      ms[i] = std::abs(std::sin(float(2 * i))) * 1e-4f;
    }
    user::Rmsprop::State state = user::Rmsprop{}.make_state(n);  // one slot, "ms"
    std::copy(ms.begin(), ms.end(), state.ms.data());
    std::vector<float> one_at_a_time = w;
    for (std::size_t i = 0; i < n; ++i) rule(one_at_a_time[i], g[i], ms[i]);
    optim::apply_rule(rule, std::span<float>(w), std::span<float const>(g), state, 0);
    CHECK(w == one_at_a_time);
    CHECK(std::equal(ms.begin(), ms.end(), state.ms.data()));
  }
}

TEST_CASE("Adam's update a block at a time gives the bits of its rule one weight at a time") {
  optim::AdamRule const rule = AdamW{.lr = 3e-3f, .weight_decay = 0.01f}.rule(StepInfo{7});
  for (std::size_t n : {1u, 7u, 15u, 16u, 17u, 255u, 256u, 257u, 1003u}) {
    CAPTURE(n);
    std::size_t const offset = 3;  // the state's slots at an offset, as a slice's are
    std::vector<float> w(n), g(n), a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = std::cos(float(i));
      g[i] = std::sin(float(5 * i)) * 1e-2f;
      a[i] = std::sin(float(i)) * 1e-2f;
      b[i] = std::cos(float(3 * i)) * 3e-3f;
    }
    Adam::State state = Adam{}.make_state(n + offset);
    for (std::size_t i = 0; i < n + offset; ++i) {
      state.m.data()[i] = std::sin(float(2 * i)) * 1e-3f;
      state.v.data()[i] = std::abs(std::cos(float(7 * i))) * 1e-5f;  // a few exactly 0 or tiny: roots of every size
    }
    std::vector<float> m(state.m.data() + offset, state.m.data() + offset + n);
    std::vector<float> v(state.v.data() + offset, state.v.data() + offset + n);
    std::vector<float> one_at_a_time = w;
    for (std::size_t i = 0; i < n; ++i) rule(one_at_a_time[i], (a[i] + b[i]) * 0.5f, m[i], v[i]);
    optim::apply_rule(rule, std::span<float>(w), optim::SummedGradient{a.data(), b.data(), 0.5f}, state, offset);
    CHECK(w == one_at_a_time);
    CHECK(std::equal(m.begin(), m.end(), state.m.data() + offset));
    CHECK(std::equal(v.begin(), v.end(), state.v.data() + offset));
    std::vector<float> stored = w;  // and from a stored gradient
    for (std::size_t i = 0; i < n; ++i) rule(stored[i], g[i], m[i], v[i]);
    optim::apply_rule(rule, std::span<float>(w), std::span<float const>(g), state, offset);
    CHECK(w == stored);
    CHECK(std::equal(v.begin(), v.end(), state.v.data() + offset));
  }
}

TEST_CASE("hyper-parameters that cannot work are rejected with the value") {
  CHECK_THROWS_WITH_AS(Sgd{.lr = -1.0f}.validate(), "Sgd: lr -1 must be a positive finite number", ConfigError);
  CHECK_THROWS_AS(Sgd{.momentum = 1.0f}.validate(), ConfigError);
  CHECK_THROWS_AS(Adam{.beta1 = 1.0f}.validate(), ConfigError);
  CHECK_THROWS_AS(AdamW{.weight_decay = -0.1f}.validate(), ConfigError);
  CHECK_THROWS_AS(Lamb{.epsilon = 0.0f}.validate(), ConfigError);
  CHECK_THROWS_WITH_AS(scheduled(Sgd{}, WarmupLinearDecay{.warmup_steps = 10, .total_steps = 10}).validate(),
                       "WarmupLinearDecay: warmup_steps 10, total_steps 10, end_factor 0; need 0 <= warmup_steps < "
                       "total_steps and end_factor in [0, 1]",
                       ConfigError);
  CHECK_THROWS_AS(CosineDecay{.decay_steps = 0}.validate(), ConfigError);
  CHECK_THROWS_AS(StepDecay{.every_steps = 0}.validate(), ConfigError);
  CHECK_THROWS_AS((void)linear_scaling(0.1f, 0, 256), ConfigError);
  CHECK_NOTHROW(Adam{}.validate());
}

TEST_CASE("Lamb: one step by hand, per tensor, with and without weight decay") {
  double const lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-6, wd = 0.1;
  std::vector<double> const w0{1.0, -2.0, 0.5}, g{0.5, -1.0, 0.25};
  for (bool decay : {true, false}) {
    std::vector<double> u(3);
    double wn = 0, un = 0;
    // Step 1: m = (1 - b1) g, v = (1 - b2) g^2, bias-corrected to g and g^2.
    for (std::size_t i = 0; i < 3; ++i) {
      double const m = (1 - b1) * g[i] / (1 - b1), v = (1 - b2) * g[i] * g[i] / (1 - b2);
      u[i] = m / (std::sqrt(v) + eps) + (decay ? wd * w0[i] : 0.0);
      wn += w0[i] * w0[i];
      un += u[i] * u[i];
    }
    double const ratio = decay ? std::sqrt(wn) / std::sqrt(un) : 1.0;
    std::vector<float> w{1.0f, -2.0f, 0.5f};
    std::vector<float> const gf{0.5f, -1.0f, 0.25f};
    Lamb const lamb{.lr = 0.01f, .weight_decay = 0.1f};
    auto state = lamb.make_state(3);
    lamb.update(std::span<float>(w), std::span<float const>(gf), state, 0, StepInfo{1, 1.0f, decay});
    for (std::size_t i = 0; i < 3; ++i) CHECK(w[i] == doctest::Approx(w0[i] - lr * ratio * u[i]).epsilon(1e-6));
  }
  // A zero tensor has no trust ratio to take: it falls back to 1.
  CHECK(Lamb::trust_ratio({0.0, 4.0}) == 1.0f);
  CHECK(Lamb::trust_ratio({9.0, 4.0}) == doctest::Approx(1.5));
}

TEST_CASE("schedules give their closed forms, and scheduled() runs the optimizer at lr * factor") {
  WarmupLinearDecay const linear{.warmup_steps = 4, .total_steps = 12, .end_factor = 0.0f};
  CHECK(linear(0) == 0.0f);
  CHECK(linear(2) == 0.5f);
  CHECK(linear(4) == 1.0f);
  CHECK(linear(8) == 0.5f);
  CHECK(linear(12) == 0.0f);
  CHECK(linear(20) == 0.0f);
  CosineDecay const cosine{.decay_steps = 10, .alpha = 0.2f, .warmup_steps = 2};
  CHECK(cosine(1) == 0.5f);
  CHECK(cosine(2) == doctest::Approx(1.0));
  CHECK(cosine(7) == doctest::Approx(0.2 + 0.8 * 0.5));  // halfway through the decay
  CHECK(cosine(12) == doctest::Approx(0.2));
  CHECK(cosine(99) == doctest::Approx(0.2));
  StepDecay const staircase{.every_steps = 3, .factor = 0.5f};
  CHECK(staircase(2) == 1.0f);
  CHECK(staircase(3) == 0.5f);
  CHECK(staircase(7) == 0.25f);
  CHECK(ConstantSchedule{}(1000) == 1.0f);
  CHECK(linear_scaling(0.1f, 256, 1024) == doctest::Approx(0.4));

  // Plain SGD with g = 1: each step moves the weight by -lr * factor(step - 1).
  auto const opt = scheduled(Sgd{.lr = 0.1f}, staircase);
  static_assert(std::string_view(decltype(opt)::name) == "Sgd");
  std::vector<float> w{0.0f};
  std::vector<float> const g{1.0f};
  auto state = opt.make_state(1);
  double expected = 0.0;
  for (int t = 1; t <= 7; ++t) {
    opt.update(std::span<float>(w), std::span<float const>(g), state, 0, t);
    expected -= 0.1 * staircase(t - 1);
    CHECK(w[0] == doctest::Approx(expected).epsilon(1e-6));
  }
}

namespace {
using Mlp = Sequential<Dense<784, 24>, Relu, Dense<24, 10>>;

Dataset const& sample() {
  static Dataset const data = data::fashion_mnist(data::Split::train).take(96);
  return data;
}

// The gradient of the mean loss over the whole batch, on one replica, by hand (the oracle).
std::vector<float> full_gradient(Mlp& model) {
  Mlp::Workspace<CpuBackend> ws(96);
  Matrix const x = detail::eigen(sample().features());
  Matrix const y = detail::eigen(sample().targets());
  model.forward<CpuBackend>(ws, model.parameters().data(), view(x), {});
  SoftmaxCrossEntropy{}.forward_backward<CpuBackend>(ws.output(), view(y), ws.output_gradient(), 1.0f / 96.0f);
  model.backward<CpuBackend>(ws, model.parameters().data(), model.gradients().data(), view(x), false);
  return {model.gradients().begin(), model.gradients().end()};
}

// One optimizer step of Trainer<Strategy> on the 96-sample batch.
template <class Strategy, class O>
std::vector<float> one_step(O const& optimizer, float clip = 0.0f) {
  Mlp model(3);
  Trainer<Strategy> trainer;
  trainer.fit(model, optimizer, SoftmaxCrossEntropy{}, sample(),
              {.batch_size = 96, .shuffle = false, .clip_global_norm = clip});
  return {model.parameters().begin(), model.parameters().end()};
}

double max_difference(std::vector<float> const& a, std::vector<float> const& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}
}  // namespace

TEST_CASE_TEMPLATE("clipping by the global norm scales the reduced gradient across all replicas", S, OneDevice,
                   Mirrored<2>, Mirrored<3>) {
  Mlp model(3);
  std::vector<float> const w0(model.parameters().begin(), model.parameters().end());
  std::vector<float> const g = full_gradient(model);
  double norm = 0.0;
  for (float v : g) norm += double(v) * v;
  norm = std::sqrt(norm);
  REQUIRE(norm > 0.5);
  for (float clip : {float(norm / 4), float(norm * 2)}) {
    double const factor = std::min(1.0, clip / norm);
    std::vector<float> expected(w0.size());
    for (std::size_t i = 0; i < w0.size(); ++i) expected[i] = float(w0[i] - 0.5 * factor * g[i]);
    CHECK(max_difference(one_step<S>(Sgd{.lr = 0.5f}, clip), expected) < 1e-6);
  }
}

TEST_CASE_TEMPLATE("Lamb in the trainer takes each tensor's trust ratio over all replicas", S, OneDevice, Mirrored<2>,
                   Mirrored<3>) {
  // The oracle: Lamb::update on each whole tensor of the single-replica gradient.
  Mlp model(3);
  std::vector<float> const g = full_gradient(model);
  Lamb const lamb{.lr = 0.02f, .weight_decay = 0.05f, .exclude_from_weight_decay = {"bias"}};
  std::vector<float> expected(model.parameters().begin(), model.parameters().end());
  auto state = lamb.make_state(expected.size());
  for (auto const& t : Mlp::parameter_tensors()) {
    std::size_t const n = nn::element_count(t.shape);
    lamb.update(std::span<float>(expected).subspan(t.offset, n), std::span<float const>(g).subspan(t.offset, n), state,
                t.offset, StepInfo{1, 1.0f, lamb.decays(t.name)});
  }
  CHECK(max_difference(one_step<S>(lamb), expected) < 1e-6);
  // The exclusions matter: kernels without decay and trust ratio take another step.
  CHECK(max_difference(one_step<S>(Lamb{.lr = 0.02f, .weight_decay = 0.05f, .exclude_from_weight_decay = {"kernel"}}),
                       expected) > 1e-4);
}

TEST_CASE("a user's optimizer with an element rule trains across replicas as on one, in the trainer") {
  Mlp const model(3);
  auto const one = one_step<OneDevice>(user::Rmsprop{.lr = 0.01f});
  CHECK(max_difference(one_step<Mirrored<3>>(user::Rmsprop{.lr = 0.01f}), one) < 1e-5);
  CHECK(max_difference(one, std::vector<float>(model.parameters().begin(), model.parameters().end())) > 1e-3);
}

TEST_CASE("AdamW's exclusions leave the named tensors to plain Adam") {
  auto const decayed = one_step<Mirrored<2>>(AdamW{.lr = 0.01f, .weight_decay = 0.5f, .exclude_from_weight_decay = {"bias"}});
  auto const plain = one_step<Mirrored<2>>(Adam{.lr = 0.01f});
  for (auto const& t : Mlp::parameter_tensors()) {
    std::size_t const n = nn::element_count(t.shape);
    std::vector<float> const a(decayed.begin() + long(t.offset), decayed.begin() + long(t.offset + n));
    std::vector<float> const b(plain.begin() + long(t.offset), plain.begin() + long(t.offset + n));
    CAPTURE(t.name);
    if (t.name.find("bias") != std::string::npos) CHECK(a == b);
    else CHECK(max_difference(a, b) > 1e-4);
  }
}
