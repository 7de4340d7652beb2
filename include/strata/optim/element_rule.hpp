#pragma once
// Element rules: an optimizer's update of one weight, written once for every device.
//
// A rule is a small struct of numbers (the step's learning rate, betas, corrections) with a
// call operator that updates one weight from its gradient and its state slots:
//
//   STRATA_ELEMENT_RULE(SgdRule, struct SgdRule {
//     float rate;
//     void operator()(float& w, float g) const { w -= rate * g; }
//   };)
//
// The macro defines the struct for the host and keeps its text, which the Cuda device
// compiles with NVRTC into its update kernels (optim/element_rule_cuda.hpp): the CPU loop
// and the GPU kernel run the same arithmetic, and an optimizer of a user's own runs on the
// GPU with no second copy of its rule. The text is therefore plain C++17 of floats and ints:
// no std::, no headers, math through the C names (sqrtf, expf, fabsf) that both sides have,
// and no preprocessor lines. The call operator takes the weight and its slots by reference,
// the gradient by value, one slot per non-empty state slot in for_each_slot's order.
//
// An optimizer with a rule (ElementwiseOptimizer) returns it from rule(StepInfo) and updates
// through apply_rule; a layer-wise optimizer's rule (Lamb's) offers moments and direction
// instead, for the two phases its trust ratio needs.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>

#include <math.h>  // sqrtf and the other C names a rule's text uses on both devices

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "strata/core/error.hpp"
#include "strata/optim/optimizer.hpp"

// Defines the rule `Name` from its text, and keeps the text and the name where
// rule_source<Name> and rule_name<Name> find them (by argument-dependent lookup, so a rule
// may live in the user's own namespace).
#define STRATA_ELEMENT_RULE(Name, ...)                                                         \
  __VA_ARGS__                                                                                  \
  [[maybe_unused]] constexpr std::string_view strata_rule_source(Name const*) { return #__VA_ARGS__; } \
  [[maybe_unused]] constexpr std::string_view strata_rule_name(Name const*) { return #Name; }

namespace strata::optim {

// The most state slots a rule may take (Adam takes two).
inline constexpr int max_rule_slots = 4;

template <class R>
concept ElementRule = std::is_trivially_copyable_v<R> && requires(R const* r) {
  { strata_rule_source(r) } -> std::convertible_to<std::string_view>;
  { strata_rule_name(r) } -> std::convertible_to<std::string_view>;
};

template <ElementRule R>
constexpr std::string_view rule_source = strata_rule_source(static_cast<R const*>(nullptr));
template <ElementRule R>
constexpr std::string_view rule_name = strata_rule_name(static_cast<R const*>(nullptr));

// Whether rule R updates a weight with `Slots` state slots.
template <class R, int Slots>
constexpr bool takes_slots = [] {
  if constexpr (Slots == 0) return std::is_invocable_v<R const&, float&, float>;
  else if constexpr (Slots == 1) return std::is_invocable_v<R const&, float&, float, float&>;
  else if constexpr (Slots == 2) return std::is_invocable_v<R const&, float&, float, float&, float&>;
  else if constexpr (Slots == 3) return std::is_invocable_v<R const&, float&, float, float&, float&, float&>;
  else return std::is_invocable_v<R const&, float&, float, float&, float&, float&, float&>;
}();

// An optimizer whose update is one element rule: rule(step) for the step's numbers.
template <class O>
concept ElementwiseOptimizer = Optimizer<O> && requires(O const& o, StepInfo step) {
  { o.rule(step) } -> ElementRule;
};

// A layer-wise optimizer (optimizer.hpp's LayerwiseOptimizer) with a two-slot rule:
// u = rule.moments(w, g, s0, s1) updates the slots and returns the update direction, and
// rule.direction(w, s0, s1) recomputes it; w -= o.step_rate(step, ratio) * u, with the
// tensor's ratio.
template <class O>
concept LayerwiseRuleOptimizer = LayerwiseOptimizer<O> && requires(O const& o, StepInfo step, float& s) {
  { o.rule(step) } -> ElementRule;
  { o.step_rate(step, 1.0f) } -> std::same_as<float>;
  { o.rule(step).moments(1.0f, 1.0f, s, s) } -> std::same_as<float>;
  { o.rule(step).direction(1.0f, 1.0f, 1.0f) } -> std::same_as<float>;
};

// The state's non-empty slots from `offset` on, in for_each_slot's order, and their count.
template <class State>
int slot_pointers(State& state, std::size_t offset, std::array<float*, max_rule_slots>& slots) {
  int count = 0;
  state.for_each_slot([&](char const* name, AlignedBuffer& slot) {
    if (count == max_rule_slots)
      throw ConfigError(strata::detail::message("element rule: the state slot '", name, "' is one more than the ",
                                                max_rule_slots, " a rule can take"));
    slots[std::size_t(count++)] = slot.data() + offset;
  });
  return count;
}

// Where a rule loop reads the gradient: g(i) for the i-th weight of the run.
namespace detail {
struct StoredGradient {  // a gradient in memory
  float const* __restrict g;
  float operator()(std::size_t i) const { return g[i]; }
};
struct ScaledGradient {  // scale * a: one arena
  float const* __restrict a;
  float scale;
  float operator()(std::size_t i) const { return a[i] * scale; }
};
struct SummedPairGradient {  // scale * (a + b): two arenas
  float const* __restrict a;
  float const* __restrict b;
  float scale;
  float operator()(std::size_t i) const { return (a[i] + b[i]) * scale; }
};

template <class R, class G>
void rule_loop(R const rule, std::size_t n, G const g, float* __restrict w) {
  for (std::size_t i = 0; i < n; ++i) rule(w[i], g(i));
}
template <class R, class G>
void rule_loop(R const rule, std::size_t n, G const g, float* __restrict w, float* __restrict a) {
  for (std::size_t i = 0; i < n; ++i) rule(w[i], g(i), a[i]);
}
template <class R, class G>
void rule_loop(R const rule, std::size_t n, G const g, float* __restrict w, float* __restrict a, float* __restrict b) {
  for (std::size_t i = 0; i < n; ++i) rule(w[i], g(i), a[i], b[i]);
}

// x[i] = sqrt(x[i]) for i < n, correctly rounded as sqrtf rounds, eight or sixteen at a time
// where the CPU has the instructions.
inline void square_roots(float* __restrict x, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {  // the masked form: _mm512_sqrt_ps trips GCC 12's maybe-uninitialized
    __m512 const v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(x + i, _mm512_mask_sqrt_ps(v, __mmask16(0xffff), v));
  }
#elif defined(__AVX__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#elif defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = sqrtf(x[i]);
}
}  // namespace detail

// A rule whose update takes one square root may also give its two halves around it
// (AdamRule does): r.before_root(g, slots...) updates the state slots and returns the value
// whose root the update takes, r.after_root(w, g, slots..., root) finishes the weight; its
// call operator must be the two with sqrtf between. GCC vectorizes no loop that calls sqrtf
// unless errno is off (-fno-math-errno), so the plain loop over such a rule runs one weight
// at a time; the host runs a RootSplitRule a block of weights at a time instead: the first
// half, the block's roots with vector instructions (the same correctly rounded roots), then
// the second half. The rule's bits, several times faster (docs/benchmarks.md, "Adam's update
// a block at a time"). For rules of one or two state slots.
template <class R>
concept RootSplitRule = requires(R const r, float& w, float g, float& a) {
  { r.before_root(g, a) } -> std::same_as<float>;
  r.after_root(w, g, a, 1.0f);
} || requires(R const r, float& w, float g, float& a, float& b) {
  { r.before_root(g, a, b) } -> std::same_as<float>;
  r.after_root(w, g, a, b, 1.0f);
};

namespace detail {
// The loops over a RootSplitRule of one or two slots: a block through the first half, its
// roots, the block through the second half.
template <class G, class First, class Second>
void split_root_loop(std::size_t n, G const g, First&& first_half, Second&& second_half) {
  constexpr std::size_t block = 256;
  alignas(64) float roots[block];
  for (std::size_t begin = 0; begin < n; begin += block) {
    std::size_t const count = std::min(block, n - begin);
    for (std::size_t j = 0; j < count; ++j) roots[j] = first_half(begin + j, g(begin + j));
    square_roots(roots, count);
    for (std::size_t j = 0; j < count; ++j) second_half(begin + j, g(begin + j), roots[j]);
  }
}
template <RootSplitRule R, class G>
  requires requires(R const r, float& a) { r.before_root(1.0f, a); }
void rule_loop(R const rule, std::size_t n, G const g, float* __restrict w, float* __restrict a) {
  split_root_loop(
      n, g, [&](std::size_t i, float gi) { return rule.before_root(gi, a[i]); },
      [&](std::size_t i, float gi, float root) { rule.after_root(w[i], gi, a[i], root); });
}
template <RootSplitRule R, class G>
  requires requires(R const r, float& a, float& b) { r.before_root(1.0f, a, b); }
void rule_loop(R const rule, std::size_t n, G const g, float* __restrict w, float* __restrict a, float* __restrict b) {
  split_root_loop(
      n, g, [&](std::size_t i, float gi) { return rule.before_root(gi, a[i], b[i]); },
      [&](std::size_t i, float gi, float root) { rule.after_root(w[i], gi, a[i], b[i], root); });
}
template <class R, class G>
void rule_loop(R const rule, std::size_t n, G const g, float* __restrict w, float* __restrict a, float* __restrict b,
               float* __restrict c) {
  for (std::size_t i = 0; i < n; ++i) rule(w[i], g(i), a[i], b[i], c[i]);
}
template <class R, class G>
void rule_loop(R const rule, std::size_t n, G const g, float* __restrict w, float* __restrict a, float* __restrict b,
               float* __restrict c, float* __restrict d) {
  for (std::size_t i = 0; i < n; ++i) rule(w[i], g(i), a[i], b[i], c[i], d[i]);
}
}  // namespace detail

// Calls f.template operator()<Slots>() for the run-time slot count, among the counts rule
// R takes; a count it does not take is a ConfigError naming the rule.
template <ElementRule R, class F>
void with_slot_count(int slots, F&& f) {
  auto const one = [&]<int K>() {
    if constexpr (takes_slots<R, K>) {
      f.template operator()<K>();
      return true;
    } else {
      return false;
    }
  };
  bool done = false;
  switch (slots) {
    case 0: done = one.template operator()<0>(); break;
    case 1: done = one.template operator()<1>(); break;
    case 2: done = one.template operator()<2>(); break;
    case 3: done = one.template operator()<3>(); break;
    case 4: done = one.template operator()<4>(); break;
    default: break;
  }
  if (!done)
    throw ConfigError(strata::detail::message("element rule ", rule_name<R>, ": the optimizer's state has ", slots,
                                              " slots but the rule's call operator does not take that many (it takes "
                                              "the weight, the gradient, then one float& per state slot)"));
}

namespace detail {
// The CPU update of w = weights[offset, offset + w.size()) by `rule`, the gradient read
// through g, the state's slots read and written at the same offset.
template <ElementRule R, class G, class State>
void apply_rule_with(R const& rule, std::span<float> w, G const& g, State& state, std::size_t offset) {
  std::array<float*, max_rule_slots> s{};
  int const slots = slot_pointers(state, offset, s);
  std::size_t const n = w.size();
  with_slot_count<R>(slots, [&]<int K>() {
    if constexpr (K == 0) rule_loop(rule, n, g, w.data());
    else if constexpr (K == 1) rule_loop(rule, n, g, w.data(), s[0]);
    else if constexpr (K == 2) rule_loop(rule, n, g, w.data(), s[0], s[1]);
    else if constexpr (K == 3) rule_loop(rule, n, g, w.data(), s[0], s[1], s[2]);
    else rule_loop(rule, n, g, w.data(), s[0], s[1], s[2], s[3]);
  });
}
}  // namespace detail

// The CPU update of w = weights[offset, offset + n) with gradient g by `rule`, reading and
// writing the state's slots at the same offset.
template <ElementRule R, class State>
void apply_rule(R const& rule, std::span<float> w, std::span<float const> g, State& state, std::size_t offset) {
  detail::apply_rule_with(rule, w, detail::StoredGradient{g.data()}, state, offset);
}

// A gradient that is the sum of one or two gradient arenas times a scale: what the update
// of replicas that each wrote their own gradient reads (train/slice_update.hpp). Each
// weight's gradient is scale * first[i], or scale * (first[i] + second[i]): the bits of
// summing the arenas into memory and then scaling them (comm::reduce_range), computed in the
// update's own loop. One pass that streams the arenas, the weights and the state together
// is never slower than a reduce into a buffer followed by the update, and faster where
// memory is slow (docs/benchmarks.md).
struct SummedGradient {
  float const* first;             // the arenas, each at the index of the update's w[0]
  float const* second = nullptr;  // null: one arena
  float scale = 1.0f;
};

template <ElementRule R, class State>
void apply_rule(R const& rule, std::span<float> w, SummedGradient const& g, State& state, std::size_t offset) {
  if (g.second) detail::apply_rule_with(rule, w, detail::SummedPairGradient{g.first, g.second, g.scale}, state, offset);
  else detail::apply_rule_with(rule, w, detail::ScaledGradient{g.first, g.scale}, state, offset);
}

}  // namespace strata::optim
