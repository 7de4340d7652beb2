#pragma once
// Sequential<Layers...>: a model whose architecture is a type.
//
// Widths are checked at compile time; all parameters live in one contiguous arena (and
// all gradients in a parallel one), each layer's block starting on a cache line, so
// optimizers and collectives work on flat memory. Activations, and the scratch buffers
// each layer declares, live in a per-replica Workspace sized once for the largest shard,
// so a training step allocates nothing.
//
// A column of the model's input is one sample; a layer may map a sample's columns to more
// (an embedding: one column per token) or fewer (a pooler: one per sequence), and the model
// must end with one column per sample, for the loss.

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
#include "strata/core/product_precision.hpp"
#include "strata/core/random.hpp"
#include "strata/core/tensor.hpp"
#include "strata/nn/chain.hpp"
#include "strata/nn/layer.hpp"

namespace strata::nn {

template <Layer... Layers>
class Sequential {
  using Shape = Chain<Layers...>;  // widths, columns, offsets, names: the static part
  static constexpr std::size_t layer_count = sizeof...(Layers);
  using ScratchKeep = ScratchBuffer::Keep;

 public:
  // widths[i] is the input width of layer i; widths.back() the model's output width.
  static constexpr std::array<int, layer_count + 1> widths = Shape::widths;
  // columns[i]: columns per sample of layer i's input; columns.back() those of the output.
  static constexpr std::array<int, layer_count + 1> columns = Shape::columns;
  static constexpr std::array<std::size_t, layer_count + 1> offsets = Shape::offsets;
  static constexpr int input_width = widths.front();
  static constexpr int output_width = widths.back();
  // Floats in the arena, including the padding that starts each layer on a cache line.
  static constexpr std::size_t arena_size = offsets.back();
  // Trainable parameters, without padding.
  static constexpr std::size_t parameter_count = Shape::trainable_count;
  static_assert(columns.back() == 1,
                "strata::Sequential: the model must end with one column per sample (a loss compares one output "
                "per sample with its target); end a per-token model with a pooling layer");

  using chain_type = Shape;

  // Parameters drawn from `seed`; layers default-constructed.
  explicit Sequential(std::uint64_t seed = 0) : Sequential(seed, Layers{}...) {}
  // With configured layers: Sequential<Dense<784, 256>, Relu, Dropout, Dense<256, 10>>(seed, {}, {}, Dropout{0.2f}, {}).
  Sequential(std::uint64_t seed, Layers... layers)
      : chain_(std::move(layers)...), parameters_(arena_size), gradients_(arena_size) {
    initialize(seed);
  }

  // Every parameter tensor with its arena offset, named "<kind>_<layer index>/<name>"
  // ("dense_0/kernel", "dense_2/bias"): the names checkpoints use. The first layer is never
  // asked for its input gradient (backward passes it no dx), so what a product would read
  // transposed only for that gradient is never read transposed.
  static std::vector<ParameterTensor> parameter_tensors() {
    std::vector<ParameterTensor> tensors = Shape::parameter_tensors(input_width);
    for (ParameterTensor& t : tensors)
      if (t.read_transposed == ParameterTensor::TransposedReads::for_input_gradient)
        t.read_transposed = ParameterTensor::TransposedReads::never;
    return tensors;
  }

  // Re-draws every parameter from `seed` (Glorot/He per layer), zeroes the gradients.
  void initialize(std::uint64_t seed) {
    Rng rng(mix64(seed, 0x5eed));
    chain_.initialize(parameters_.data(), input_width, rng);
    std::fill_n(gradients_.data(), arena_size, 0.0f);
  }

  [[nodiscard]] std::span<float> parameters() { return parameters_.span(); }
  [[nodiscard]] std::span<float const> parameters() const { return parameters_.span(); }
  [[nodiscard]] std::span<float> gradients() { return gradients_.span(); }
  [[nodiscard]] std::span<float const> gradients() const { return gradients_.span(); }

  template <std::size_t I>
  [[nodiscard]] auto& layer() { return chain_.template layer<I>(); }
  template <std::size_t I>
  [[nodiscard]] auto const& layer() const { return chain_.template layer<I>(); }

  static std::string name() { return "Sequential<" + Shape::layer_names() + ">"; }

  // Throws ShapeError naming the first layer when data has the wrong number of features.
  static void check_input_width(int features) {
    if (features != input_width)
      throw ShapeError(strata::detail::message(Shape::first_name(), ": input has ", features,
                                               " features, the model expects ", input_width));
  }

 private:
  // Scratch buffers of layer I, and where layer I's start in the flat list of all of them.
  template <std::size_t I>
  static constexpr auto scratch_specs = scratch_of<std::tuple_element_t<I, std::tuple<Layers...>>>(widths[I], columns[I]);
  static constexpr std::array<std::size_t, layer_count + 1> scratch_starts = [] {
    std::array<std::size_t, layer_count + 1> s{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((s[I + 1] = s[I] + scratch_specs<I>.size()), ...);
    }(std::make_index_sequence<layer_count>{});
    return s;
  }();
  static constexpr std::size_t scratch_total = scratch_starts.back();
  static constexpr std::array<ScratchBuffer, scratch_total> all_scratch = [] {
    std::array<ScratchBuffer, scratch_total> all{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((std::copy(scratch_specs<I>.begin(), scratch_specs<I>.end(), all.begin() + std::ptrdiff_t(scratch_starts[I]))), ...);
    }(std::make_index_sequence<layer_count>{});
    return all;
  }();
  // Floats per sample of the widest activation (input, layer outputs) and of one layer's scratch.
  static constexpr std::size_t widest_per_sample = [] {
    std::size_t w = 0;
    for (std::size_t i = 0; i <= layer_count; ++i) w = std::max(w, std::size_t(widths[i]) * std::size_t(columns[i]));
    return w;
  }();
  static constexpr std::size_t floats_per_sample(ScratchBuffer const& b) {
    return std::size_t(b.rows) * std::size_t(b.columns_per_sample);
  }
  // Floats per sample of the widest scratch of one layer, from layer `from` on.
  static constexpr std::size_t widest_scratch_from(std::size_t from) {
    std::size_t widest = 0;
    for (std::size_t i = from; i < layer_count; ++i) {
      std::size_t layer = 0;
      for (std::size_t s = scratch_starts[i]; s < scratch_starts[i + 1]; ++s) layer += floats_per_sample(all_scratch[s]);
      widest = std::max(widest, layer);
    }
    return widest;
  }
  static constexpr std::size_t widest_scratch_per_sample = widest_scratch_from(0);
  static constexpr int widest_columns = *std::max_element(columns.begin(), columns.end());
  // A first layer that packs its columns (nn::PacksColumns: Bert's real tokens) lets a mixed
  // pass's chunk hold as many samples as their packed columns fit in its scratch. Its buffers
  // of a multiple of its output's columns per sample scale with the packed columns.
  using First = std::tuple_element_t<0, std::tuple<Layers...>>;
  static constexpr bool packing = PacksColumns<First>;
  static constexpr bool scales_with_packing(std::size_t s) {
    return packing && s < scratch_starts[1] && all_scratch[s].columns_per_sample % columns[1] == 0;
  }
  // Floats of the first layer's scratch for `samples` samples of `packed` packed columns.
  static constexpr std::size_t first_scratch_floats(int samples, std::size_t packed) {
    std::size_t floats = 0;
    for (std::size_t s = 0; s < scratch_starts[1]; ++s) {
      ScratchBuffer const& b = all_scratch[s];
      floats += scales_with_packing(s) ? std::size_t(b.rows) * std::size_t(b.columns_per_sample / columns[1]) * packed
                                       : floats_per_sample(b) * std::size_t(samples);
    }
    return floats;
  }
  static constexpr std::size_t widest_later_scratch_per_sample = widest_scratch_from(1);  // after the first layer
  // Layer i's output is kept for backward only where a backward reads it: its own (as y) or
  // the next layer's (as x). The last layer's output, the logits, is always there.
  static constexpr std::array<BackwardReads, layer_count> reads = {backward_reads<Layers>...};
  // Layers whose outputs a mixed pass need not round (selects_values: Relu).
  static constexpr std::array<bool, layer_count> selecting = {selects_values<Layers>...};
  static constexpr std::array<bool, layer_count> output_kept = [] {
    std::array<bool, layer_count> kept{};
    for (std::size_t i = 0; i + 1 < layer_count; ++i) kept[i] = reads[i].output || reads[i + 1].input;
    return kept;
  }();

 public:
  // Floats per sample of the largest activation anywhere in the model, the layers' scratch
  // (a block's inner outputs) included: what a device sizes its GEMM scratch by.
  static constexpr std::size_t largest_activation_per_sample = [] {
    std::size_t largest = widest_per_sample;
    for (ScratchBuffer const& b : all_scratch) largest = std::max(largest, floats_per_sample(b));
    return largest;
  }();

  // Activations and scratch of one replica, sized for at most `max_batch` samples.
  //
  // With T = float the outputs a backward reads (output_kept) and every scratch buffer are
  // kept in float (on a device: every output). With T = bf16 or fp16
  // (mixed precision) each layer's output is rounded to T and *stored* in T, and so is the
  // scratch a layer keeps for backward (but statistics it asks to keep in float), so the
  // activations kept for backward take half the bytes; the layers compute in float registers
  // on a chunk of samples at a time, read from and written back to 16-bit storage. The last
  // layer's output (the logits) and its gradient stay in float for the loss. Any model of
  // layers gets this, whatever its layers are: it is done here, between layers.
  template <class B, class T = float>  // not constrained here: clang 14 crashes on a constrained member class template
  class Workspace {
    static_assert(Backend<B>, "strata::Sequential::Workspace<B, T>: B must satisfy strata::Backend");
    static_assert(is_compute_type<T>, "strata::Sequential::Workspace<B, T>: T must be float, strata::bf16 or strata::fp16");

   public:
    using compute_type = T;
    using Buffer = typename backend_buffer<B>::type;  // Matrix on the CPU; device memory on a GPU
    static constexpr bool mixed = !std::is_same_v<T, float>;
    // On the host, the float pass too keeps only the outputs a backward reads (output_kept);
    // the others pass through one of two transient buffers, alternating so that a layer never
    // reads and writes the same one. A device's workspace keeps every output.
    static constexpr bool lean = std::is_same_v<Buffer, Matrix>;
    // Columns per float pass in mixed precision: 1 MiB per 1024 rows. Narrower chunks cost
    // GEMM efficiency (128 took the bf16 step from 69 to 82 ms, docs/precision.md).
    static constexpr int chunk_columns = 256;
    static constexpr int chunk_samples = std::max(1, chunk_columns / widest_columns);
    // After a first layer that packs (Bert), a chunk takes up to four times as many samples
    // while their packed columns fit: sentences of a quarter of the padded length fill it.
    static constexpr int chunk_samples_most = packing ? 4 * chunk_samples : chunk_samples;
    struct Chunk {
      int first = 0, samples = 0;
      std::size_t packed = 0;  // the first layer's packed columns (where it packs)
    };

    explicit Workspace(int max_batch) : max_batch_(max_batch) {
      auto columns_of = [&](int per_sample) { return per_sample * max_batch; };
      auto const per_sample = int(widest_per_sample);
      if constexpr (!mixed) {
        for (std::size_t i = 0; i < layer_count; ++i) {
          if (!transient(i)) {
            outputs_[i].resize(widths[i + 1], columns_of(columns[i + 1]));
          } else {
            Matrix& slot = transient_[i % 2];
            auto const floats = Matrix::Index(widths[i + 1]) * columns_of(columns[i + 1]);
            if (floats > slot.size()) slot.resize(floats, 1);
          }
        }
        for (std::size_t s = 0; s < scratch_total; ++s)
          scratch_[s].resize(all_scratch[s].rows, columns_of(all_scratch[s].columns_per_sample));
        gradient_a_.resize(per_sample, max_batch);
        gradient_b_.resize(per_sample, max_batch);
      } else {
        for (std::size_t i = 0; i + 1 < layer_count; ++i)
          if (output_kept[i])
            stored_[i] = AlignedArray<T>(std::size_t(widths[i + 1]) * std::size_t(columns_of(columns[i + 1])));
        for (std::size_t s = 0; s < scratch_total; ++s) {
          std::size_t const floats = floats_per_sample(all_scratch[s]) * std::size_t(max_batch);
          if (all_scratch[s].keep == ScratchKeep::kept) stored_scratch_[s] = AlignedArray<T>(floats);
          else if (all_scratch[s].keep == ScratchKeep::kept_float) stored_float_scratch_[s] = AlignedBuffer(floats);
        }
        outputs_[layer_count - 1].resize(output_width, max_batch);
        gradient_a_.resize(output_width, max_batch);
        // Every chunk but the last has chunk_samples samples or more.
        std::size_t const most_chunks = std::size_t(std::max(1, (max_batch + chunk_samples - 1) / chunk_samples));
        chunks_.reserve(most_chunks);
        in_use_.resize(most_chunks * scratch_total);
        for (Buffer* m : {&chunk_in_, &chunk_out_, &gradient_b_, &chunk_dx_})
          m->setZero(per_sample, std::min(max_batch, chunk_samples_most));
        chunk_scratch_.setZero(int(std::max<std::size_t>(widest_scratch_per_sample, 1)), std::min(max_batch, chunk_samples));
      }
    }
    [[nodiscard]] int max_batch() const { return max_batch_; }
    [[nodiscard]] int batch() const { return batch_; }
    // Mixed precision: the samples each float pass of the last forward took.
    [[nodiscard]] std::span<Chunk const> chunks() const { return chunks_; }
    [[nodiscard]] ConstMatrixView output() const { return output(layer_count - 1); }
    // Where the loss writes d(loss)/d(output) for the current batch.
    [[nodiscard]] MatrixView output_gradient() { return {gradient_a_.data(), output_width, batch_}; }

    // Bytes of the activations kept from forward for backward (layer outputs and the scratch
    // layers keep), and of everything the workspace holds (those plus gradients and float scratch).
    [[nodiscard]] std::size_t activation_bytes() const {
      std::size_t total = 0;
      for (auto const& m : outputs_) total += std::size_t(m.size()) * sizeof(float);
      for (std::size_t s = 0; s < scratch_total; ++s)
        if (all_scratch[s].keep != ScratchKeep::temporary) total += std::size_t(scratch_[s].size()) * sizeof(float);
      for (auto const& v : stored_) total += v.size() * sizeof(T);
      for (auto const& v : stored_scratch_) total += v.size() * sizeof(T);
      for (auto const& v : stored_float_scratch_) total += v.size() * sizeof(float);
      return total;
    }
    [[nodiscard]] std::size_t bytes() const {
      std::size_t total = activation_bytes();
      for (std::size_t s = 0; s < scratch_total; ++s)
        if (all_scratch[s].keep == ScratchKeep::temporary) total += std::size_t(scratch_[s].size()) * sizeof(float);
      for (Buffer const* m : {&gradient_a_, &gradient_b_, &chunk_in_, &chunk_out_, &chunk_scratch_, &chunk_dx_})
        total += std::size_t(m->size()) * sizeof(float);
      for (Matrix const& m : transient_) total += std::size_t(m.size()) * sizeof(float);
      return total;
    }

   private:
    friend class Sequential;
    // Whether the float pass passes layer i's output through a transient buffer (lean, above).
    static constexpr bool transient(std::size_t i) { return lean && !mixed && i + 1 < layer_count && !output_kept[i]; }
    [[nodiscard]] ConstMatrixView output(std::size_t i) const {
      return {transient(i) ? transient_[i % 2].data() : outputs_[i].data(), widths[i + 1], columns[i + 1] * batch_};
    }
    [[nodiscard]] MatrixView output(std::size_t i) {
      ConstMatrixView const v = std::as_const(*this).output(i);
      return {const_cast<float*>(v.data), v.rows, v.cols};
    }
    // Mixed precision: the floats of each scratch view that chunk `c` kept (nn::scratch_in_use,
    // recorded by forward for backward's load).
    [[nodiscard]] std::span<std::size_t> in_use(std::size_t c) {
      return {in_use_.data() + c * scratch_total, scratch_total};
    }
    // Layer I's scratch views over `samples` samples: the whole-batch buffers (float), or
    // the chunk area (mixed precision), where a packing first layer's buffers that scale
    // with its packed columns get `packed` columns' worth.
    template <std::size_t I>
    Scratch scratch(int samples, std::size_t packed = 0) {
      std::size_t at = 0;
      for (std::size_t s = scratch_starts[I]; s < scratch_starts[I + 1]; ++s) {
        ScratchBuffer const& b = all_scratch[s];
        float* data = mixed ? chunk_scratch_.data() + at : scratch_[s].data();
        int cols = b.columns_per_sample * samples;
        if (mixed && scales_with_packing(s)) cols = b.columns_per_sample / columns[1] * int(packed);
        views_[s] = MatrixView{data, b.rows, cols};
        at += views_[s].size();
      }
      return Scratch(views_.data() + scratch_starts[I], scratch_specs<I>.size());
    }

    int max_batch_;
    int batch_ = 0;
    std::array<Buffer, layer_count> outputs_;  // float: those kept (every one on a device); mixed: only the last
    std::array<Matrix, 2> transient_;            // float on the host: the outputs no backward reads
    std::array<Buffer, scratch_total> scratch_;  // float only
    std::array<MatrixView, scratch_total> views_{};
    Buffer gradient_a_, gradient_b_;
    // Mixed precision only: the stored activations and scratch, and the float working set of one chunk.
    // (Zeroed bytewise: a std::vector<bf16> value-initialises element by element, 50 times slower.)
    std::array<AlignedArray<T>, layer_count> stored_;  // the outputs a backward reads (output_kept)
    std::array<AlignedArray<T>, scratch_total> stored_scratch_;
    std::array<AlignedBuffer, scratch_total> stored_float_scratch_;
    Buffer chunk_in_, chunk_out_, chunk_scratch_, chunk_dx_;
    std::vector<Chunk> chunks_;        // the last forward's chunks, for backward
    std::vector<std::size_t> in_use_;  // scratch_total per chunk (in_use)
  };

  // Runs every layer on x (input_width x b, b <= max_batch); the result is workspace.output().
  template <Backend B, class T>
  void forward(Workspace<B, T>& ws, float const* params, ConstMatrixView x, ForwardContext const& context) const {
    int const samples = x.cols;  // the model's input has one column per sample
    if (samples > ws.max_batch_)
      throw ShapeError(strata::detail::message(name(), ": a shard of ", samples, " samples exceeds the workspace's ",
                                               ws.max_batch_));
    ws.batch_ = samples;
    if constexpr (Workspace<B, T>::mixed) {
      forward_mixed(ws, params, x, context);
    } else {
      chain_.for_each_layer([&]<std::size_t I>(auto const& layer) {
        ConstMatrixView in = I == 0 ? x : ConstMatrixView(ws.output(I - 1));
        layer.template forward<B>(params + offsets[I], in, ws.output(I), ws.template scratch<I>(samples),
                                  context.for_columns(columns[I]).for_layer(I));
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
  // (In mixed precision, during the last chunk of samples: the earlier ones only add.)
  template <Backend B, class T, class LayerDone>
  void backward(Workspace<B, T>& ws, float const* params, float* grads, ConstMatrixView x, bool accumulate,
                LayerDone&& layer_done) const {
    if constexpr (Workspace<B, T>::mixed) {
      backward_mixed(ws, params, grads, x, accumulate, layer_done);
    } else {
      float* dy = ws.gradient_a_.data();
      float* dx = ws.gradient_b_.data();
      int const b = ws.batch_;
      chain_.for_each_layer_reversed([&]<std::size_t I>(auto const& layer) {
        using L = std::remove_cvref_t<decltype(layer)>;
        if constexpr (Workspace<B, T>::lean && nn::backward_in_place<L, float>) {  // dx over dy, no swap
          if constexpr (I > 0) L::backward_in_place(ws.output(I).data, dy, ws.output(I).size());
          layer_done(I);
          return;
        }
        // On the host, what the layer does not read (reads[I]) is a null view, as in mixed precision.
        ConstMatrixView in = I == 0 ? x : ConstMatrixView(ws.output(I - 1));
        ConstMatrixView y = ws.output(I);
        if constexpr (Workspace<B, T>::lean && !reads[I].input) in.data = nullptr;
        if constexpr (Workspace<B, T>::lean && I + 1 < layer_count && !reads[I].output) y.data = nullptr;
        MatrixView dx_view = I == 0 ? MatrixView{} : MatrixView{dx, widths[I], columns[I] * b};
        layer.template backward<B>(params + offsets[I], grads + offsets[I], in, y, ws.template scratch<I>(b),
                                   ConstMatrixView{dy, widths[I + 1], columns[I + 1] * b}, dx_view, accumulate);
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
      forward(ws, parameters_.data(), view(x).columns(first, count), ForwardContext{.backward_follows = false});
      result.middleCols(first, count) = strata::detail::eigen(ws.output());
    }
    return result;
  }

 private:
  // Mixed precision, chunk by chunk of samples: each layer reads its input from 16-bit
  // storage into float, computes in float and rounds its output to T before storing it,
  // so every value a layer sees is one a T can hold (what a GPU's 16-bit kernels see).
  template <class B, class T>
  void forward_mixed(Workspace<B, T>& ws, float const* params, ConstMatrixView x, ForwardContext const& context) const {
    Bf16ProductsBinding const bf16_products(std::is_same_v<T, bf16>);  // where the CPU multiplies bf16
    ws.chunks_.clear();
    for (int first = 0; first < ws.batch_; first += ws.chunks_.back().samples) {
      ws.chunks_.push_back(next_chunk(ws, x, first));
      std::size_t const index = ws.chunks_.size() - 1;
      typename Workspace<B, T>::Chunk const chunk = ws.chunks_.back();
      int const n = chunk.samples;
      float* in = ws.chunk_in_.data();
      float* out = ws.chunk_out_.data();
      cast_input<T>(x.columns(first, n), in);
      ForwardContext chunk_context = context;
      chunk_context.first_sample += first;
      chain_.for_each_layer([&]<std::size_t I>(auto const& layer) {
        constexpr int w = widths[I + 1];
        constexpr int c = columns[I + 1];
        MatrixView y = I + 1 == layer_count ? ws.output(I).columns(first * c, n * c) : MatrixView{out, w, n * c};
        Scratch const scratch = ws.template scratch<I>(n, chunk.packed);
        layer.template forward<B>(params + offsets[I], ConstMatrixView{in, widths[I], n * columns[I]}, y, scratch,
                                  chunk_context.for_columns(columns[I]).for_layer(I));
        T* keep = nullptr;
        if constexpr (output_kept[I])
          if (context.backward_follows) keep = ws.stored_[I].data() + std::size_t(first) * w * c;
        round_and_keep<T, !selecting[I]>(y.data, y.size(), keep);
        if (context.backward_follows) keep_scratch<I>(ws, scratch, index, first, /*save=*/true);
        std::swap(in, out);
      });
    }
  }

  template <class B, class T, class LayerDone>
  void backward_mixed(Workspace<B, T>& ws, float const* params, float* grads, ConstMatrixView x, bool accumulate,
                      LayerDone&& layer_done) const {
    using W = Workspace<B, T>;
    Bf16ProductsBinding const bf16_products(std::is_same_v<T, bf16>);
    int const b = ws.batch_;
    // Forward's chunks; at least one pass, so that an empty shard still writes its (zero)
    // weight gradients.
    for (std::size_t index = 0; index < std::max<std::size_t>(ws.chunks_.size(), 1); ++index) {
      typename W::Chunk const chunk = index < ws.chunks_.size() ? ws.chunks_[index] : typename W::Chunk{};
      int const first = chunk.first, n = chunk.samples;
      float* dy = ws.gradient_b_.data();
      float* dx = ws.chunk_dx_.data();
      ConstMatrixView const dlogits = ConstMatrixView(ws.output_gradient()).columns(first, n);
      std::copy_n(dlogits.data, dlogits.size(), dy);
      round_to<T>(dy, dlogits.size());  // the gradient enters the T graph
      chain_.for_each_layer_reversed([&]<std::size_t I>(auto const& layer) {
        using L = std::remove_cvref_t<decltype(layer)>;
        constexpr int w = widths[I + 1];
        constexpr int c = columns[I + 1];
        // A layer that runs in place reads its kept output where it is and writes dx over dy.
        if constexpr (Workspace<B, T>::lean && I + 1 < layer_count && nn::backward_in_place<L, T>) {
          static_assert(output_kept[I], "a layer whose backward runs in place from its output reads its output");
          if constexpr (I > 0) {
            std::size_t const count = std::size_t(w) * c * n;
            L::backward_in_place(ws.stored_[I].data() + std::size_t(first) * w * c, dy, count);
            round_and_keep<T, !selecting[I]>(dy, count, nullptr);
          }
          if (first + n >= b) layer_done(I);
          return;
        }
        // What the layer does not read (reads[I]) is neither loaded nor there: a null view.
        float* in = nullptr;
        if constexpr (reads[I].input) {
          in = ws.chunk_in_.data();
          if constexpr (I == 0) cast_input<T>(x.columns(first, n), in);
          else load_split<T>(in, ws.stored_[I - 1].data() + std::size_t(first) * widths[I] * columns[I],
                             std::size_t(widths[I]) * columns[I] * n);
        }
        ConstMatrixView y{nullptr, w, n * c};
        if constexpr (I + 1 == layer_count) {
          y = ConstMatrixView(ws.output(I)).columns(first * c, n * c);  // the logits, always in float
        } else if constexpr (reads[I].output) {
          load_split<T>(ws.chunk_out_.data(), ws.stored_[I].data() + std::size_t(first) * w * c, std::size_t(w) * c * n);
          y.data = ws.chunk_out_.data();
        }
        Scratch const scratch = ws.template scratch<I>(n, chunk.packed);
        keep_scratch<I>(ws, scratch, index, first, /*save=*/false);
        MatrixView dx_view = I == 0 ? MatrixView{} : MatrixView{dx, widths[I], columns[I] * n};
        layer.template backward<B>(params + offsets[I], grads + offsets[I], ConstMatrixView{in, widths[I], columns[I] * n},
                                   y, scratch, ConstMatrixView{dy, w, c * n}, dx_view, accumulate || first > 0);
        round_and_keep<T, !selecting[I]>(dx_view.data, dx_view.size(), nullptr);
        if (first + n >= b) layer_done(I);
        std::swap(dy, dx);
      });
    }
  }

  // A mixed pass's next chunk, from sample `first`: chunk_samples samples, or after a first
  // layer that packs, as many more (up to chunk_samples_most) as their packed columns fit in
  // the chunk's scratch, which holds chunk_samples padded samples.
  template <class W>
  typename W::Chunk next_chunk(W const& ws, ConstMatrixView x, int first) const {
    int const left = ws.batch_ - first;
    typename W::Chunk chunk{first, std::min(W::chunk_samples, left), 0};
    if constexpr (packing) {
      auto const& layer = chain_.template layer<0>();
      chunk.packed = layer.packed_columns(x.columns(first, chunk.samples));
      std::size_t const capacity = std::size_t(ws.chunk_scratch_.size());
      int most = std::min(W::chunk_samples_most, left);
      if constexpr (widest_later_scratch_per_sample > 0)  // the later layers' scratch, chunk_samples of it or more
        most = std::min(most, std::max(chunk.samples, int(capacity / widest_later_scratch_per_sample)));
      while (chunk.samples < most) {
        std::size_t const packed = chunk.packed + layer.packed_columns(x.columns(first + chunk.samples, 1));
        if (first_scratch_floats(chunk.samples + 1, packed) > capacity) break;
        chunk.packed = packed;
        ++chunk.samples;
      }
    }
    return chunk;
  }

  // Saves layer I's kept scratch of the chunk at sample `first` into its batch-sized storage
  // (T, or float for statistics), or loads it back: of each view, what the layer's forward
  // wrote (nn::scratch_in_use; the rest of a view is never read), so that a layer filling a
  // prefix (Bert's packed tokens) converts no padding.
  template <std::size_t I, class B, class T>
  void keep_scratch(Workspace<B, T>& ws, Scratch scratch, std::size_t chunk, int first, bool save) const {
    constexpr std::size_t count = scratch_specs<I>.size();  // none for most layers
    if constexpr (count > 0) {
      std::span<std::size_t> const in_use = ws.in_use(chunk).subspan(scratch_starts[I], count);
      if (save) nn::scratch_in_use(chain_.template layer<I>(), scratch, in_use);
      for (std::size_t k = 0; k < count; ++k) {
        std::size_t const s = scratch_starts[I] + k;
        MatrixView const v = scratch[k];
        std::size_t const n = std::min(in_use[k], v.size());
        std::size_t const at = std::size_t(first) * floats_per_sample(all_scratch[s]);
        if (all_scratch[s].keep == ScratchKeep::kept) {
          if (save) store<T>(ws.stored_scratch_[s].data() + at, v.data, n);
          else load<T>(v.data, ws.stored_scratch_[s].data() + at, n);
        } else if (all_scratch[s].keep == ScratchKeep::kept_float) {
          if (save) std::copy_n(v.data, n, ws.stored_float_scratch_[s].data() + at);
          else std::copy_n(ws.stored_float_scratch_[s].data() + at, n, v.data);
        }
      }
    }
  }

  // The model's input, cast to the compute type (as Keras casts a layer's inputs), except
  // ids (token ids), which the first layer must see exactly.
  template <class T>
  static void cast_input(ConstMatrixView x, float* out) {
    run_split_floats(x.size(), [&](std::size_t begin, std::size_t count) {
      std::copy_n(x.data + begin, count, out + begin);
      if constexpr (!nn::takes_ids<Shape>) round_to<T>(out + begin, count);
    });
  }

  // The mixed pass's conversions between layers, split over the bound intra-op team where
  // large (core/intra_op.hpp), like the layers' own element-wise work: y rounded to T in
  // place (unless `Round` is false: a layer that selects_values outputs only values T holds)
  // and, unless keep is nullptr, kept in T; and a kept activation read back.
  template <class T, bool Round = true>
  static void round_and_keep(float* y, std::size_t n, T* keep) {
    if (!Round && keep == nullptr) return;
    run_split_floats(n, [&](std::size_t begin, std::size_t count) {
      if constexpr (Round) round_to<T>(y + begin, count);
      if (keep != nullptr) store<T>(keep + begin, y + begin, count);
    });
  }
  template <class T>
  static void load_split(float* out, T const* in, std::size_t n) {
    run_split_floats(n, [&](std::size_t begin, std::size_t count) { load<T>(out + begin, in + begin, count); });
  }

  Shape chain_;
  AlignedBuffer parameters_;
  AlignedBuffer gradients_;
};

}  // namespace strata::nn
