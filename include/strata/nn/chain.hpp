#pragma once
// Chain<Layers...>: layers applied one after another, as one layer. It is the static shape
// of a Sequential (widths, columns per sample, parameter offsets, names) and the block a
// Residual wraps: Residual<Sequential<Dense<384, 1536>, Gelu, Dense<1536, 384>>> runs the
// Sequential's Chain, which owns no memory (the model's arena and workspace hold it all).
//
// As a layer, a chain's scratch is the output of each of its layers but the last, each
// layer's own scratch, and two temporary buffers for the gradients between its layers.

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/aligned_buffer.hpp"
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

// The trainable floats of a layer: a composite one excludes its internal padding.
template <class L>
constexpr std::size_t trainable_count(int width) {
  if constexpr (requires { L::trainable(width); }) return L::trainable(width);
  else return L::parameter_count(width);
}

}  // namespace detail

template <Layer... Layers>
class Chain {
  static_assert(sizeof...(Layers) >= 1, "strata::Sequential: give at least one layer");
  using First = typename detail::first_layer<Layers...>::type;
  static_assert(First::input_width != any_width,
                "strata::Sequential: the first layer must fix the input width; start with Dense<In, Out>");
  static_assert(detail::walk_widths<First, First::input_width, Layers...>::ok);

 public:
  static constexpr std::size_t layer_count = sizeof...(Layers);
  // widths[i]: the input width of layer i; widths.back(): the output width.
  static constexpr std::array<int, layer_count + 1> widths = [] {
    std::array<int, layer_count + 1> w{};
    w[0] = First::input_width;
    std::size_t i = 0;
    ((w[i + 1] = Layers::output_width(w[i]), ++i), ...);
    return w;
  }();
  // columns[i]: columns per sample of layer i's input, for one column per sample coming in.
  static constexpr std::array<int, layer_count + 1> columns = [] {
    std::array<int, layer_count + 1> c{};
    c[0] = 1;
    std::size_t i = 0;
    ((c[i + 1] = output_columns_of<Layers>(c[i]), ++i), ...);
    return c;
  }();
  // Columns per sample of layer i's input for `c` coming into the chain. (Not columns[i] * c:
  // a layer that pools a sequence, such as a pooler's FirstToken, divides.)
  static constexpr int columns_at(std::size_t layer, int c) {
    std::array<int, layer_count + 1> a{};
    a[0] = c;
    std::size_t i = 0;
    ((a[i + 1] = output_columns_of<Layers>(a[i]), ++i), ...);
    return a[layer];
  }
  // offsets[i]: where layer i's parameters start; each layer's block starts on a cache line.
  static constexpr std::array<std::size_t, layer_count + 1> offsets = [] {
    std::array<std::size_t, layer_count + 1> o{};
    std::size_t i = 0;
    ((o[i + 1] = round_up_to_line(o[i] + Layers::parameter_count(widths[i])), ++i), ...);
    return o;
  }();
  static constexpr std::size_t trainable_count = [] {
    std::size_t total = 0, i = 0;
    ((total += detail::trainable_count<Layers>(widths[i]), ++i), ...);
    return total;
  }();

  // The Layer protocol.
  static constexpr int input_width = widths.front();
  static constexpr int output_width(int) { return widths.back(); }
  static constexpr std::size_t parameter_count(int) { return offsets.back(); }
  static constexpr std::size_t trainable(int) { return trainable_count; }  // without the padding
  static constexpr int output_columns(int c) { return columns_at(layer_count, c); }
  static constexpr bool takes_ids = nn::takes_ids<First>;
  static constexpr char const* kind = "block";
  static std::string name() { return "Chain<" + layer_names() + ">"; }
  static std::string layer_names() {
    std::string s;
    std::size_t i = 0;
    ((s += (i++ ? ", " : "") + Layers::name()), ...);
    return s;
  }
  static std::string first_name() { return First::name(); }

  // Every parameter tensor, named "<kind>_<layer index>/<name>" ("dense_0/kernel").
  static std::vector<ParameterTensor> parameter_tensors(int) {
    std::vector<ParameterTensor> out;
    std::size_t i = 0;
    (append_tensors<Layers>(out, i++), ...);
    return out;
  }

  static constexpr std::size_t scratch_size = (layer_count - 1) + (scratch_count<Layers> + ... + 0) + 2;
  static constexpr std::array<ScratchBuffer, scratch_size> scratch(int, int c) {
    std::array<ScratchBuffer, scratch_size> s{};
    std::size_t at = 0, i = 0;
    int widest = 0, most_columns = 1;
    auto add_layer = [&]<class L>() {
      for (ScratchBuffer b : scratch_of<L>(widths[i], columns_at(i, c))) s[at++] = b;
      if (i + 1 < layer_count) s[at++] = {widths[i + 1], columns_at(i + 1, c), ScratchBuffer::Keep::kept};
      widest = std::max(widest, widths[i] * columns_at(i, c));
      most_columns = std::max(most_columns, columns_at(i, c));
      ++i;
    };
    (add_layer.template operator()<Layers>(), ...);
    // The gradients between layers: the widest activation's floats per sample, as columns
    // of the most columns per sample, so that where a model packs its columns (Bert's real
    // tokens, nn::PacksColumns) these buffers pack with them.
    ScratchBuffer const gradients{(widest + most_columns - 1) / most_columns, most_columns, ScratchBuffer::Keep::temporary};
    s[at++] = gradients;
    s[at++] = gradients;
    return s;
  }

  Chain() = default;
  explicit Chain(Layers... layers) : layers_(std::move(layers)...) {}

  void initialize(float* params, int, Rng& rng) const {
    for_each_layer([&]<std::size_t I>(auto const& layer) { layer.initialize(params + offsets[I], widths[I], rng); });
  }

  template <class B>
  void forward(float const* params, ConstMatrixView x, MatrixView y, Scratch scratch, ForwardContext const& context) const {
    ConstMatrixView in = x;
    std::size_t at = 0;
    for_each_layer([&]<std::size_t I>(auto const& layer) {
      using L = std::remove_cvref_t<decltype(layer)>;
      Scratch const own = scratch.subspan(at, scratch_count<L>);
      at += scratch_count<L>;
      MatrixView out = y;
      if constexpr (I + 1 < layer_count) out = scratch[at++];
      ForwardContext layer_context = context.for_layer(I);
      layer_context.columns_per_sample = columns_at(I, context.columns_per_sample);
      layer.template forward<B>(params + offsets[I], in, out, own, layer_context);
      in = out;
    });
  }

  template <class B>
  void backward(float const* params, float* grads, ConstMatrixView x, ConstMatrixView y, Scratch scratch,
                ConstMatrixView dy, MatrixView dx, bool accumulate) const {
    float* gradient_out = scratch[scratch_size - 2].data;
    float* gradient_in = scratch[scratch_size - 1].data;
    ConstMatrixView next_gradient = dy;
    for_each_layer_reversed([&]<std::size_t I>(auto const& layer) {
      using L = std::remove_cvref_t<decltype(layer)>;
      std::size_t const own_at = scratch_start<I>();
      Scratch const own = scratch.subspan(own_at, scratch_count<L>);
      ConstMatrixView const in = I == 0 ? x : ConstMatrixView(scratch[scratch_start<I - 1>() + scratch_count<previous_t<I>>]);
      ConstMatrixView const out = I + 1 == layer_count ? y : ConstMatrixView(scratch[own_at + scratch_count<L>]);
      MatrixView gradient = dx;
      if constexpr (I > 0) gradient = MatrixView{gradient_out, widths[I], in.cols};
      layer.template backward<B>(params + offsets[I], grads + offsets[I], in, out, own, next_gradient, gradient, accumulate);
      next_gradient = gradient;
      std::swap(gradient_out, gradient_in);
    });
  }

  // The floats of each scratch view that forward wrote for backward (nn::scratch_in_use):
  // what each layer says of its own views, and the whole of each output between layers.
  void scratch_in_use(Scratch scratch, std::span<std::size_t> floats) const {
    for (std::size_t k = 0; k < scratch.size(); ++k) floats[k] = scratch[k].size();
    for_each_layer([&]<std::size_t I>(auto const& layer) {
      constexpr std::size_t at = scratch_start<I>(), count = scratch_count<std::remove_cvref_t<decltype(layer)>>;
      nn::scratch_in_use(layer, scratch.subspan(at, count), floats.subspan(at, count));
    });
  }

  template <std::size_t I>
  [[nodiscard]] auto& layer() { return std::get<I>(layers_); }
  template <std::size_t I>
  [[nodiscard]] auto const& layer() const { return std::get<I>(layers_); }

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

 private:
  template <std::size_t I>
  using previous_t = std::tuple_element_t<(I > 0 ? I - 1 : 0), std::tuple<Layers...>>;
  // Where layer I's own scratch starts in the chain's list (each layer: its scratch, then its output).
  template <std::size_t I>
  static constexpr std::size_t scratch_start() {
    constexpr std::array<std::size_t, layer_count> counts{scratch_count<Layers>...};
    std::size_t at = 0;
    for (std::size_t i = 0; i < I; ++i) at += counts[i] + 1;
    return at;
  }

  template <class L>
  static void append_tensors(std::vector<ParameterTensor>& out, std::size_t i) {
    if constexpr (requires { L::parameter_tensors(0); }) {
      for (auto t : L::parameter_tensors(widths[i])) {
        t.name = std::string(L::kind) + "_" + std::to_string(i) + "/" + t.name;
        t.offset += offsets[i];
        // A later layer's input gradient is always asked for: the layers before it need it.
        if (i > 0 && t.read_transposed == ParameterTensor::TransposedReads::for_input_gradient)
          t.read_transposed = ParameterTensor::TransposedReads::possible;
        out.push_back(std::move(t));
      }
    } else {
      static_assert(L::parameter_count(1) == 0 || requires { L::parameter_tensors(0); },
                    "strata::Sequential: a layer with parameters must name them (L::kind, L::parameter_tensors) "
                    "so checkpoints can store them");
    }
  }

  std::tuple<Layers...> layers_;
};

}  // namespace strata::nn
