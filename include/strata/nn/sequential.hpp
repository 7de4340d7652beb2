#pragma once
// Sequential<Layers...>: a model whose architecture is a type.
//
// Widths are checked at compile time; all parameters live in one contiguous arena (and
// all gradients in a parallel one), each layer's block starting on a cache line, so
// optimizers and collectives work on flat memory. Activations live in a per-replica
// Workspace sized once for the largest shard, so a training step allocates nothing.

#include <algorithm>
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
#include "strata/core/dtype.hpp"
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
  //
  // With T = float every layer's output is kept in float. With T = bf16 or fp16 (mixed
  // precision) each layer's output is rounded to T and *stored* in T, so the activations
  // kept for backward take half the bytes; the layers compute in float registers on
  // `chunk_columns` samples at a time, read from and written back to 16-bit storage. The
  // last layer's output (the logits) and its gradient stay in float for the loss.
  template <class B, class T = float>  // not constrained here: clang 14 crashes on a constrained member class template
  class Workspace {
    static_assert(Backend<B>, "strata::Sequential::Workspace<B, T>: B must satisfy strata::Backend");
    static_assert(is_compute_type<T>, "strata::Sequential::Workspace<B, T>: T must be float, strata::bf16 or strata::fp16");

   public:
    using compute_type = T;
    using Buffer = typename backend_buffer<B>::type;  // Matrix on the CPU; device memory on a GPU
    static constexpr bool mixed = !std::is_same_v<T, float>;
    // Samples per float pass in mixed precision: 1 MiB per 1024 rows. Narrower chunks cost
    // GEMM efficiency (128 took the bf16 step from 69 to 82 ms, docs/precision.md).
    static constexpr int chunk_columns = 256;

    explicit Workspace(int max_batch) : max_batch_(max_batch) {
      int widest = 0;
      for (std::size_t i = 0; i < layer_count; ++i) widest = std::max(widest, widths[i + 1]);
      if constexpr (!mixed) {
        for (std::size_t i = 0; i < layer_count; ++i) outputs_[i].resize(widths[i + 1], max_batch);
        std::size_t i = 0;
        ((Layers::uses_aux ? aux_[i].resize(widths[i + 1], max_batch) : void(), ++i), ...);
        gradient_a_.resize(widest, max_batch);
        gradient_b_.resize(widest, max_batch);
      } else {
        for (std::size_t i = 0; i + 1 < layer_count; ++i) stored_[i].resize(std::size_t(widths[i + 1]) * max_batch);
        std::size_t i = 0;
        ((Layers::uses_aux ? stored_aux_[i].resize(std::size_t(widths[i + 1]) * max_batch) : void(), ++i), ...);
        outputs_[layer_count - 1].resize(output_width, max_batch);
        gradient_a_.resize(output_width, max_batch);
        int const chunk = std::min(max_batch, chunk_columns);
        for (Buffer* m : {&chunk_in_, &chunk_out_, &chunk_aux_, &gradient_b_, &chunk_dx_})
          m->setZero(std::max(widest, input_width), chunk);
      }
    }
    [[nodiscard]] int max_batch() const { return max_batch_; }
    [[nodiscard]] int batch() const { return batch_; }
    [[nodiscard]] ConstMatrixView output() const { return output(layer_count - 1); }
    // Where the loss writes d(loss)/d(output) for the current batch.
    [[nodiscard]] MatrixView output_gradient() { return {gradient_a_.data(), output_width, batch_}; }

    // Bytes of the activations kept from forward for backward (layer outputs and dropout
    // masks), and of everything the workspace holds (those plus the gradient and float scratch).
    [[nodiscard]] std::size_t activation_bytes() const {
      std::size_t total = 0;
      for (auto const& m : outputs_) total += std::size_t(m.size()) * sizeof(float);
      for (auto const& m : aux_) total += std::size_t(m.size()) * sizeof(float);
      for (auto const& v : stored_) total += v.size() * sizeof(T);
      for (auto const& v : stored_aux_) total += v.size() * sizeof(T);
      return total;
    }
    [[nodiscard]] std::size_t bytes() const {
      std::size_t total = activation_bytes();
      for (Buffer const* m : {&gradient_a_, &gradient_b_, &chunk_in_, &chunk_out_, &chunk_aux_, &chunk_dx_})
        total += std::size_t(m->size()) * sizeof(float);
      return total;
    }

   private:
    friend class Sequential;
    [[nodiscard]] ConstMatrixView output(std::size_t i) const { return {outputs_[i].data(), widths[i + 1], batch_}; }
    [[nodiscard]] MatrixView output(std::size_t i) { return {outputs_[i].data(), widths[i + 1], batch_}; }
    [[nodiscard]] MatrixView aux(std::size_t i) { return {aux_[i].data(), widths[i + 1], batch_}; }

    int max_batch_;
    int batch_ = 0;
    std::array<Buffer, layer_count> outputs_;  // float: every layer; mixed: only the last
    std::array<Buffer, layer_count> aux_;
    Buffer gradient_a_, gradient_b_;
    // Mixed precision only: the stored 16-bit activations and the float working set of one chunk.
    std::array<std::vector<T>, layer_count> stored_;
    std::array<std::vector<T>, layer_count> stored_aux_;
    Buffer chunk_in_, chunk_out_, chunk_aux_, chunk_dx_;
  };

  // Runs every layer on x (input_width x b, b <= max_batch); the result is workspace.output().
  template <Backend B, class T>
  void forward(Workspace<B, T>& ws, float const* params, ConstMatrixView x, ForwardContext const& context) const {
    if (x.cols > ws.max_batch_)
      throw ShapeError(strata::detail::message(name(), ": a shard of ", x.cols, " samples exceeds the workspace's ",
                                               ws.max_batch_));
    ws.batch_ = x.cols;
    if constexpr (Workspace<B, T>::mixed) {
      forward_mixed(ws, params, x, context);
    } else {
      for_each_layer([&]<std::size_t I>(auto const& layer) {
        ConstMatrixView in = I == 0 ? x : ConstMatrixView(ws.output(I - 1));
        layer.template forward<B>(params + offsets[I], in, ws.output(I), ws.aux(I), context);
      });
    }
  }

  // Back-propagates workspace.output_gradient() (written by the loss) through the layers of
  // the last forward pass. Gradients are written to `grads`, or added when `accumulate`.
  template <Backend B, class T>
  void backward(Workspace<B, T>& ws, float const* params, float* grads, ConstMatrixView x, bool accumulate) const {
    backward<B>(ws, params, grads, x, accumulate, [](std::size_t) {});
  }
  // The same, calling layer_done(i) as soon as layer i's gradients are final (from the last
  // layer to the first): the hook that lets a bucket's all-reduce start during backward.
  // (In mixed precision every layer is final only after the last chunk.)
  template <Backend B, class T, class LayerDone>
  void backward(Workspace<B, T>& ws, float const* params, float* grads, ConstMatrixView x, bool accumulate,
                LayerDone&& layer_done) const {
    if constexpr (Workspace<B, T>::mixed) {
      backward_mixed(ws, params, grads, x, accumulate);
      for_each_layer_reversed([&]<std::size_t I>(auto const&) { layer_done(I); });
    } else {
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

  // Mixed precision, chunk by chunk of samples: each layer reads its input from 16-bit
  // storage into float, computes in float and rounds its output to T before storing it,
  // so every value a layer sees is one a T can hold (what a GPU's 16-bit kernels see).
  template <class B, class T>
  void forward_mixed(Workspace<B, T>& ws, float const* params, ConstMatrixView x, ForwardContext const& context) const {
    for (int first = 0; first < x.cols; first += Workspace<B, T>::chunk_columns) {
      int const n = std::min(Workspace<B, T>::chunk_columns, x.cols - first);
      float* in = ws.chunk_in_.data();
      float* out = ws.chunk_out_.data();
      cast_input<T>(x.columns(first, n), in);
      ForwardContext chunk_context = context;
      chunk_context.first_sample += first;
      for_each_layer([&]<std::size_t I>(auto const& layer) {
        constexpr int w = widths[I + 1];
        MatrixView y = I + 1 == layer_count ? ws.output(I).columns(first, n) : MatrixView{out, w, n};
        MatrixView aux{ws.chunk_aux_.data(), w, n};
        layer.template forward<B>(params + offsets[I], ConstMatrixView{in, widths[I], n}, y, aux, chunk_context);
        round_to<T>(y.data, y.size());
        std::size_t const at = std::size_t(first) * w;
        if constexpr (I + 1 < layer_count) store<T>(ws.stored_[I].data() + at, y.data, y.size());
        if constexpr (std::remove_cvref_t<decltype(layer)>::uses_aux) store<T>(ws.stored_aux_[I].data() + at, aux.data, aux.size());
        std::swap(in, out);
      });
    }
  }

  template <class B, class T>
  void backward_mixed(Workspace<B, T>& ws, float const* params, float* grads, ConstMatrixView x, bool accumulate) const {
    int const b = ws.batch_;
    // At least one pass, so that an empty shard still writes its (zero) weight gradients.
    for (int first = 0; first < b || first == 0; first += Workspace<B, T>::chunk_columns) {
      int const n = std::min(Workspace<B, T>::chunk_columns, b - first);
      float* dy = ws.gradient_b_.data();
      float* dx = ws.chunk_dx_.data();
      ConstMatrixView const dlogits = ConstMatrixView(ws.output_gradient()).columns(first, n);
      std::copy_n(dlogits.data, dlogits.size(), dy);
      round_to<T>(dy, dlogits.size());  // the gradient enters the T graph
      for_each_layer_reversed([&]<std::size_t I>(auto const& layer) {
        using L = std::remove_cvref_t<decltype(layer)>;
        constexpr int w = widths[I + 1];
        std::size_t const at = std::size_t(first) * w;
        float* in = ws.chunk_in_.data();
        if constexpr (I == 0) cast_input<T>(x.columns(first, n), in);
        else load<T>(in, ws.stored_[I - 1].data() + std::size_t(first) * widths[I], std::size_t(widths[I]) * n);
        ConstMatrixView y = ConstMatrixView(ws.output(I)).columns(first, n);
        if constexpr (I + 1 < layer_count) {
          load<T>(ws.chunk_out_.data(), ws.stored_[I].data() + at, std::size_t(w) * n);
          y = ConstMatrixView{ws.chunk_out_.data(), w, n};
        }
        if constexpr (L::uses_aux) load<T>(ws.chunk_aux_.data(), ws.stored_aux_[I].data() + at, std::size_t(w) * n);
        MatrixView dx_view = I == 0 ? MatrixView{} : MatrixView{dx, widths[I], n};
        layer.template backward<B>(params + offsets[I], grads + offsets[I], ConstMatrixView{in, widths[I], n}, y,
                                   ConstMatrixView{ws.chunk_aux_.data(), w, n}, ConstMatrixView{dy, w, n}, dx_view,
                                   accumulate || first > 0);
        round_to<T>(dx_view.data, dx_view.size());
        std::swap(dy, dx);
      });
    }
  }

  // The model's input, cast to the compute type (as Keras casts a layer's inputs).
  template <class T>
  static void cast_input(ConstMatrixView x, float* out) {
    std::copy_n(x.data, x.size(), out);
    round_to<T>(out, x.size());
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
