#pragma once
// An optimizer's element rule on the Cuda device: the rule's own text (kept by
// STRATA_ELEMENT_RULE, optim/element_rule.hpp) compiled by NVRTC after the device prelude,
// with an update kernel per slot count the rule takes. So Sgd, Adam and an optimizer of a
// user's own run the arithmetic the CPU runs, from one copy. Included by strata/cuda.hpp.
//
//   strata_rule_K(w, g, s0, s1, s2, s3, n, rule)   rule(w[i], g[i], s0[i], ... s(K-1)[i])
//
// A layer-wise rule (Lamb's) gets the two phases of its trust ratio instead:
//
//   strata_layerwise_moments(w, g, m, v, n, rule, partials)   u = rule.moments(...), with this
//        block's shares of sum w^2 in partials[block] and of sum u^2 in partials[grid + block]
//   strata_layerwise_apply(w, m, v, n, rate, rule)             w -= rate * rule.direction(...)
//
// The rule struct crosses to the kernel by value: its host and device layouts are one
// definition's.

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/cuda/context.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/optim/element_rule.hpp"

namespace strata::optim {

namespace detail {

inline std::string rule_kernel_text(std::string_view rule, int slots) {
  std::string const k = std::to_string(slots);
  std::string text = "extern \"C\" __global__ void strata_rule_" + k +
                     "(float* w, const float* g, float* s0, float* s1, float* s2, float* s3, i64 n, " +
                     std::string(rule) + " rule) {\n  GRID_LOOP(i, n) rule(w[i], g[i]";
  char const* const slot_names[] = {"s0", "s1", "s2", "s3"};
  for (int s = 0; s < slots; ++s) text += std::string(", ") + slot_names[s] + "[i]";
  return text + ");\n}\n";
}

inline std::string layerwise_kernel_text(std::string_view rule) {
  std::string const r(rule);
  return "extern \"C\" __global__ void strata_layerwise_moments(const float* w, const float* g, float* m, float* v, "
         "i64 n, " + r + " rule, double* partials) {\n"
         "  double weight = 0.0, update = 0.0;\n"
         "  GRID_LOOP(i, n) {\n"
         "    float u = rule.moments(w[i], g[i], m[i], v[i]);\n"
         "    weight += double(w[i]) * double(w[i]);\n"
         "    update += double(u) * double(u);\n"
         "  }\n"
         "  double weights = block_sum(weight);\n"
         "  double updates = block_sum(update);\n"
         "  if (threadIdx.x == 0) {\n"
         "    partials[blockIdx.x] = weights;\n"
         "    partials[gridDim.x + blockIdx.x] = updates;\n"
         "  }\n"
         "}\n"
         "extern \"C\" __global__ void strata_layerwise_apply(float* w, const float* m, const float* v, i64 n, "
         "float rate, " + r + " rule) {\n"
         "  GRID_LOOP(i, n) w[i] -= rate * rule.direction(w[i], m[i], v[i]);\n"
         "}\n";
}

// The kernels of a rule: its module, and which of its kernels serves each slot count (-1:
// none). Built in place (the module points into it), once per rule type.
class RuleKernels {
 public:
  template <ElementRule R>
  explicit RuleKernels(std::type_identity<R>) : source_(std::string(cuda::device_prelude) + "\n" + std::string(rule_source<R>) + "\n") {
    [&]<int... S>(std::integer_sequence<int, S...>) {
      ((takes_slots<R, S> ? (index_of_slots_[S] = add("strata_rule_" + std::to_string(S), rule_kernel_text(rule_name<R>, S)))
                          : 0),
       ...);
    }(std::make_integer_sequence<int, max_rule_slots + 1>{});
    if constexpr (requires(R const& r, float& s) {
                    r.moments(1.0f, 1.0f, s, s);
                    r.direction(1.0f, 1.0f, 1.0f);
                  }) {
      layerwise_moments_ = add("strata_layerwise_moments", layerwise_kernel_text(rule_name<R>));
      layerwise_apply_ = add("strata_layerwise_apply", {});
    }
    for (auto const& name : names_) name_pointers_.push_back(name.c_str());
    module_ = {rule_name<R>, source_, name_pointers_};
  }
  RuleKernels(RuleKernels const&) = delete;
  RuleKernels& operator=(RuleKernels const&) = delete;

  [[nodiscard]] cuda::KernelModule const& module() const { return module_; }
  [[nodiscard]] std::size_t for_slots(int k) const { return std::size_t(index_of_slots_[std::size_t(k)]); }
  [[nodiscard]] std::size_t layerwise_moments() const { return std::size_t(layerwise_moments_); }
  [[nodiscard]] std::size_t layerwise_apply() const { return std::size_t(layerwise_apply_); }

 private:
  // Appends a kernel's text and name; returns its index in the module.
  int add(std::string name, std::string const& text) {
    source_ += text;
    names_.push_back(std::move(name));
    return int(names_.size()) - 1;
  }

  std::string source_;
  std::vector<std::string> names_;
  std::vector<char const*> name_pointers_;
  std::array<int, max_rule_slots + 1> index_of_slots_{-1, -1, -1, -1, -1};
  int layerwise_moments_ = -1, layerwise_apply_ = -1;
  cuda::KernelModule module_;
};

}  // namespace detail

// The module of rule R's kernels: made once per process, compiled on first launch.
template <ElementRule R>
detail::RuleKernels const& rule_kernels() {
  static detail::RuleKernels const kernels{std::type_identity<R>{}};
  return kernels;
}

// w[0, n) updated by `rule` on `context`'s stream, from gradient g and the state slots
// (`slots` of them in `s`, each already at the piece's offset).
template <ElementRule R>
void launch_rule(cuda::Context& context, R const& rule, float* w, float const* g,
                 std::array<float*, max_rule_slots> const& s, int slots, std::size_t n) {
  auto const& kernels = rule_kernels<R>();
  with_slot_count<R>(slots, [&]<int K>() {
    context.launch(kernels.module(), kernels.for_slots(K), std::int64_t(n), w, g, s[0], s[1], s[2], s[3], (long long)n,
                   rule);
  });
}

// A layer-wise rule's first phase: the moments of w[0, n), and the blocks' shares of
// sum w^2 and sum u^2 in partials[0, 2 * cuda::sum_blocks).
template <ElementRule R>
void launch_layerwise_moments(cuda::Context& context, R const& rule, float const* w, float const* g, float* m,
                              float* v, std::size_t n, double* partials) {
  auto const& kernels = rule_kernels<R>();
  context.launch_blocks(kernels.module(), kernels.layerwise_moments(), cuda::sum_blocks, w, g, m, v, (long long)n, rule,
                        partials);
}

// Its second phase: w -= rate * u, with u from the moments.
template <ElementRule R>
void launch_layerwise_apply(cuda::Context& context, R const& rule, float* w, float const* m, float const* v,
                            std::size_t n, float rate) {
  auto const& kernels = rule_kernels<R>();
  context.launch(kernels.module(), kernels.layerwise_apply(), std::int64_t(n), w, m, v, (long long)n, rate, rule);
}

}  // namespace strata::optim
