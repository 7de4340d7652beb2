#pragma once
// Sequential<Layers...>: a model whose architecture is a type.
//
// Widths are checked at compile time; all parameters live in one contiguous arena (and
// all gradients in a parallel one), each layer's block starting on a cache line, so
// optimizers and collectives work on flat memory. Activations live in a per-replica
// Workspace sized once for the largest shard, so a training step allocates nothing.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/aligned_buffer.hpp"
#include "strata/core/backend.hpp"
#include "strata/core/error.hpp"
#include "strata/core/random.hpp"
#include "strata/core/tensor.hpp"
#include "strata/nn/layer.hpp"

namespace strata::nn {

namespace detail {

// Fails, naming both layers in the instantiation, when `Next` expects a width `Source` does not produce.
template <class Source, class Next, int SourceWidth>
struct check_adjacent {
  static_assert(Next::input_width == any_width || Next::input_width == SourceWidth,
                "strata::Sequential: a layer's input width differs from the output width of the layer before it "
                "(this instantiation names the feeding layer, then the next one); make Dense<In, Out>'s In equal "
                "the previous Out");
  static constexpr bool value = true;
};

template <class Source, int Width, class... Ls>
struct walk_widths {
  static constexpr bool ok = true;
};
template <class Source, int Width, class L, class... Rest>
struct walk_widths<Source, Width, L, Rest...> {
  // Width-preserving layers pass on the layer that last fixed the width, so the message names it.
  using next_source = std::conditional_t<L::input_width == any_width, Source, L>;
  static constexpr bool ok =
      check_adjacent<Source, L, Width>::value && walk_widths<next_source, L::output_width(Width), Rest...>::ok;
};

template <class First, class... Rest>
struct first_layer {
  using type = First;
};

}  // namespace detail

template <Layer... Layers>
class Sequential {
  static_assert(sizeof...(Layers) >= 1, "strata::Sequential: give at least one layer");
  using First = typename detail::first_layer<Layers...>::type;
  static_assert(First::input_width != any_width,
                "strata::Sequential: the first layer must fix the input width; start with Dense<In, Out>");
  static_assert(detail::walk_widths<First, First::input_width, Layers...>::ok);

  static constexpr std::size_t layer_count = sizeof...(Layers);

  static constexpr std::array<int, layer_count + 1> compute_widths() {
    std::array<int, layer_count + 1> w{};
    w[0] = First::input_width;
    std::size_t i = 0;
    ((w[i + 1] = Layers::output_width(w[i]), ++i), ...);
    return w;
  }

 public:
  // widths[i] is the input width of layer i; widths.back() the model's output width.
  static constexpr std::array<int, layer_count + 1> widths = compute_widths();

 private:
  static constexpr std::array<std::size_t, layer_count + 1> compute_offsets() {
    std::array<std::size_t, layer_count + 1> o{};
    std::size_t i = 0;
    ((o[i + 1] = round_up_to_line(o[i] + Layers::parameter_count(widths[i])), ++i), ...);
    return o;
  }

 public:
  static constexpr std::array<std::size_t, layer_count + 1> offsets = compute_offsets();
  static constexpr int input_width = widths.front();
  static constexpr int output_width = widths.back();
  // Floats in the arena, including the padding that starts each layer on a cache line.
  static constexpr std::size_t arena_size = offsets.back();
  // Trainable parameters, without padding.
  static constexpr std::size_t parameter_count = [] {
    std::size_t total = 0, i = 0;
    ((total += Layers::parameter_count(widths[i]), ++i), ...);
    return total;
  }();

  // Parameters drawn from `seed`; layers default-constructed.
  explicit Sequential(std::uint64_t seed = 0) : Sequential(seed, Layers{}...) {}
  // With configured layers: Sequential<Dense<784, 256>, Relu, Dropout, Dense<256, 10>>(seed, {}, {}, Dropout{0.2f}, {}).
  Sequential(std::uint64_t seed, Layers... layers)
      : layers_(std::move(layers)...), parameters_(arena_size), gradients_(arena_size) {
    initialize(seed);
  }

  // Every parameter tensor with its arena offset, named "<kind>_<layer index>/<name>"
  // ("dense_0/kernel", "dense_2/bias"): the names checkpoints use.
  static std::vector<ParameterTensor> parameter_tensors() {
    std::vector<ParameterTensor> out;
    std::size_t i = 0;
    (append_tensors<Layers>(out, i++), ...);
    return out;
  }

  // Re-draws every parameter from `seed` (Glorot/He per layer), zeroes the gradients.
  void initialize(std::uint64_t seed) {
    Rng rng(mix64(seed, 0x5eed));
    for_each_layer([&]<std::size_t I>(auto const& layer) { layer.initialize(parameters_.data() + offsets[I], widths[I], rng); });
    std::fill_n(gradients_.data(), arena_size, 0.0f);
  }

  [[nodiscard]] std::span<float> parameters() { return parameters_.span(); }
  [[nodiscard]] std::span<float const> parameters() const { return parameters_.span(); }
  [[nodiscard]] std::span<float> gradients() { return gradients_.span(); }
  [[nodiscard]] std::span<float const> gradients() const { return gradients_.span(); }

  template <std::size_t I>
  [[nodiscard]] auto& layer() { return std::get<I>(layers_); }
  template <std::size_t I>
  [[nodiscard]] auto const& layer() const { return std::get<I>(layers_); }

  static std::string name() {
    std::string s = "Sequential<";
    std::size_t i = 0;
    ((s += (i++ ? ", " : "") + Layers::name()), ...);
    return s + ">";
  }

  // Throws ShapeError naming the first layer when data has the wrong number of features.
  static void check_input_width(int features) {
    if (features != input_width)
      throw ShapeError(strata::detail::message(First::name(), ": input has ", features, " features, the model expects ",
                                               input_width));
  }

  // Activations and gradient scratch of one replica, sized for at most `max_batch` samples.
  template <class B>  // not constrained here: clang 14 crashes on a constrained member class template
  class Workspace {
    static_assert(Backend<B>, "strata::Sequential::Workspace<B>: B must satisfy strata::Backend");

   public:
    explicit Workspace(int max_batch) : max_batch_(max_batch) {
      int widest = 0;
      for (std::size_t i = 0; i < layer_count; ++i) {
        outputs_[i].resize(widths[i + 1], max_batch);
        widest = std::max(widest, widths[i + 1]);
      }
      std::size_t i = 0;
      ((Layers::uses_aux ? aux_[i].resize(widths[i + 1], max_batch) : void(), ++i), ...);
      gradient_a_.resize(widest, max_batch);
      gradient_b_.resize(widest, max_batch);
    }
    [[nodiscard]] int max_batch() const { return max_batch_; }
    [[nodiscard]] int batch() const { return batch_; }
    [[nodiscard]] ConstMatrixView output() const { return output(layer_count - 1); }
    // Where the loss writes d(loss)/d(output) for the current batch.
    [[nodiscard]] MatrixView output_gradient() { return {gradient_a_.data(), output_width, batch_}; }

   private:
    friend class Sequential;
    [[nodiscard]] ConstMatrixView output(std::size_t i) const { return {outputs_[i].data(), widths[i + 1], batch_}; }
    [[nodiscard]] MatrixView output(std::size_t i) { return {outputs_[i].data(), widths[i + 1], batch_}; }
    [[nodiscard]] MatrixView aux(std::size_t i) { return {aux_[i].data(), widths[i + 1], batch_}; }

    int max_batch_;
    int batch_ = 0;
    std::array<Matrix, layer_count> outputs_;
    std::array<Matrix, layer_count> aux_;
    Matrix gradient_a_, gradient_b_;
  };

  // Runs every layer on x (input_width x b, b <= max_batch); the result is workspace.output().
  template <Backend B>
  void forward(Workspace<B>& ws, float const* params, ConstMatrixView x, ForwardContext const& context) const {
    if (x.cols > ws.max_batch_)
      throw ShapeError(strata::detail::message(name(), ": a shard of ", x.cols, " samples exceeds the workspace's ",
                                               ws.max_batch_));
    ws.batch_ = x.cols;
    for_each_layer([&]<std::size_t I>(auto const& layer) {
      ConstMatrixView in = I == 0 ? x : ConstMatrixView(ws.output(I - 1));
      layer.template forward<B>(params + offsets[I], in, ws.output(I), ws.aux(I), context);
    });
  }

  // Back-propagates workspace.output_gradient() (written by the loss) through the layers of
  // the last forward pass. Gradients are written to `grads`, or added when `accumulate`.
  template <Backend B>
  void backward(Workspace<B>& ws, float const* params, float* grads, ConstMatrixView x, bool accumulate) const {
    backward<B>(ws, params, grads, x, accumulate, [](std::size_t) {});
  }
  // The same, calling layer_done(i) as soon as layer i's gradients are final (from the last
  // layer to the first): the hook that lets a bucket's all-reduce start during backward.
  template <Backend B, class LayerDone>
  void backward(Workspace<B>& ws, float const* params, float* grads, ConstMatrixView x, bool accumulate,
                LayerDone&& layer_done) const {
    float* dy = ws.gradient_a_.data();
    float* dx = ws.gradient_b_.data();
    int const b = ws.batch_;
    for_each_layer_reversed([&]<std::size_t I>(auto const& layer) {
      ConstMatrixView in = I == 0 ? x : ConstMatrixView(ws.output(I - 1));
      MatrixView dx_view = I == 0 ? MatrixView{} : MatrixView{dx, widths[I], b};
      layer.template backward<B>(params + offsets[I], grads + offsets[I], in, ws.output(I), ws.aux(I),
                                 ConstMatrixView{dy, widths[I + 1], b}, dx_view, accumulate);
      layer_done(I);
      std::swap(dy, dx);
    });
  }

  // Inference on the CPU, one thread, in batches of `batch_size`: returns output_width x n.
  [[nodiscard]] Matrix predict(Matrix const& x, int batch_size = 256) const {
    check_input_width(int(x.rows()));
    Matrix result(output_width, x.cols());
    Workspace<CpuBackend> ws(batch_size);
    for (int first = 0; first < x.cols(); first += batch_size) {
      int const count = std::min<int>(batch_size, int(x.cols()) - first);
      forward(ws, parameters_.data(), view(x).columns(first, count), ForwardContext{});
      result.middleCols(first, count) = strata::detail::eigen(ws.output());
    }
    return result;
  }

 private:
  template <class L>
  static void append_tensors(std::vector<ParameterTensor>& out, std::size_t i) {
    if constexpr (requires { L::parameter_tensors(0); }) {
      for (auto t : L::parameter_tensors(widths[i])) {
        t.name = std::string(L::kind) + "_" + std::to_string(i) + "/" + t.name;
        t.offset += offsets[i];
        out.push_back(std::move(t));
      }
    } else {
      static_assert(L::parameter_count(1) == 0 || requires { L::parameter_tensors(0); },
                    "strata::Sequential: a layer with parameters must name them (L::kind, L::parameter_tensors) "
                    "so checkpoints can store them");
    }
  }

  template <class F>
  void for_each_layer(F&& f) const {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (f.template operator()<I>(std::get<I>(layers_)), ...);
    }(std::make_index_sequence<layer_count>{});
  }
  template <class F>
  void for_each_layer_reversed(F&& f) const {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (f.template operator()<layer_count - 1 - I>(std::get<layer_count - 1 - I>(layers_)), ...);
    }(std::make_index_sequence<layer_count>{});
  }

  std::tuple<Layers...> layers_;
  AlignedBuffer parameters_;
  AlignedBuffer gradients_;
};

}  // namespace strata::nn
