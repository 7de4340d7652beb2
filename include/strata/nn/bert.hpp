#pragma once
// BERT as types. Bert<Layers, Hidden, Heads, Intermediate, Vocab, MaxLen> is one layer: a
// sample's MaxLen token ids in, the last hidden state out (Hidden per token, MaxLen columns
// per sample), built from strata's own layers exactly as Hugging Face's BertModel is:
//
//   embeddings  Embedding, LayerNorm, Dropout
//   each layer  (post-LN) x = LayerNorm(x + Dropout(SelfAttention(x)))
//                         x = LayerNorm(x + Dropout(Dense(Gelu(Dense(x)))))
//
// BertPooler<Hidden, MaxLen> takes each sample's [CLS] (first) token through Dense and Tanh,
// one column per sample again, for a classification head:
//
//   Sequential<Bert<6, 384, 12, 1536, 30522, 64>, BertPooler<384, 64>, Dropout, Dense<384, 2>>
//
// Bert counts each sample's tokens before its padding (ids equal to pad_id at the end) and
// runs the encoder on those alone, packed: the padding costs no work (attention over the
// real tokens is what BertModel's padding mask computes). On Cuda (nn/bert_cuda.hpp) the
// lengths are counted on the device and the batch stays padded: attention masks the
// padding's keys, and the output and its gradient are zero at the padding, as on the CPU.

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/backend.hpp"
#include "strata/core/tensor.hpp"
#include "strata/nn/activation.hpp"
#include "strata/nn/attention.hpp"
#include "strata/nn/chain.hpp"
#include "strata/nn/dense.hpp"
#include "strata/nn/dropout.hpp"
#include "strata/nn/embedding.hpp"
#include "strata/nn/layer.hpp"
#include "strata/nn/layer_norm.hpp"
#include "strata/nn/residual.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// BERT's hyper-parameters that are values, not types (config.json's dropout and epsilon).
struct BertOptions {
  float hidden_dropout = 0.1f;     // hidden_dropout_prob
  float attention_dropout = 0.1f;  // attention_probs_dropout_prob
  float layer_norm_epsilon = 1e-12f;
  float init_stddev = 0.02f;  // initializer_range, for the embedding tables
  int pad_id = 0;             // the [PAD] token's id: trailing ones are not attended to
};

// One encoder layer (post-LN), as a chain of strata layers.
template <int Hidden, int Heads, int Intermediate>
using BertLayer = Chain<Residual<Chain<SelfAttention<Hidden, Heads>, Dropout>>, LayerNorm,
                        Residual<Chain<Dense<Hidden, Intermediate>, Gelu, Dense<Intermediate, Hidden>, Dropout>>, LayerNorm>;

template <int Hidden, int Heads, int Intermediate>
BertLayer<Hidden, Heads, Intermediate> make_bert_layer(BertOptions const& o) {
  using Attention = Chain<SelfAttention<Hidden, Heads>, Dropout>;
  using Feedforward = Chain<Dense<Hidden, Intermediate>, Gelu, Dense<Intermediate, Hidden>, Dropout>;
  LayerNorm const norm{o.layer_norm_epsilon};
  return BertLayer<Hidden, Heads, Intermediate>(
      Residual<Attention>(Attention(SelfAttention<Hidden, Heads>{o.attention_dropout}, Dropout{o.hidden_dropout})), norm,
      Residual<Feedforward>(Feedforward({}, {}, {}, Dropout{o.hidden_dropout})), norm);
}

namespace detail {
template <int Vocab, int Hidden, int MaxLen, class Layer, std::size_t... I>
auto bert_chain(std::index_sequence<I...>)
    -> Chain<Embedding<Vocab, Hidden, MaxLen>, LayerNorm, Dropout, std::conditional_t<(I >= 0), Layer, void>...>;
}  // namespace detail

// A device's Bert padding (nn/bert_cuda.hpp): each sample's length from its ids, and a
// matrix with the columns at and after each sample's length set to zero.
template <class B>
struct BertPadding {
  static_assert(policy::dependent_false<B>, "strata::Bert: no padding math for this backend; include its device header");
};

template <int Layers, int Hidden, int Heads, int Intermediate, int Vocab, int MaxLen>
class Bert {
  static_assert(Layers >= 1, "strata::Bert<Layers, ...>: give at least one encoder layer");

 public:
  using layer_type = BertLayer<Hidden, Heads, Intermediate>;
  using chain_type =
      decltype(detail::bert_chain<Vocab, Hidden, MaxLen, layer_type>(std::make_index_sequence<std::size_t(Layers)>{}));
  static constexpr int layers = Layers, hidden = Hidden, heads = Heads, intermediate = Intermediate, vocab = Vocab,
                       max_length = MaxLen;

  static constexpr int input_width = MaxLen;
  static constexpr bool takes_ids = true;
  static constexpr int output_width(int) { return Hidden; }
  static constexpr int output_columns(int columns) { return columns * MaxLen; }
  static constexpr std::size_t parameter_count(int width) { return chain_type::parameter_count(width); }
  static constexpr std::size_t trainable(int width) { return chain_type::trainable(width); }
  static std::string name() {
    return "Bert<" + std::to_string(Layers) + ", " + std::to_string(Hidden) + ", " + std::to_string(Heads) + ", " +
           std::to_string(Intermediate) + ", " + std::to_string(Vocab) + ", " + std::to_string(MaxLen) + ">";
  }
  static constexpr char const* kind = "bert";
  static std::vector<ParameterTensor> parameter_tensors(int width) { return chain_type::parameter_tensors(width); }

  // The chain's scratch; then each sample's length (tokens before the padding), each packed
  // column's place in the padded batch, and the output gradient packed.
  static constexpr std::size_t chain_scratch = chain_type::scratch_size;
  enum : std::size_t { lengths_ = chain_scratch, positions_, packed_gradient_, count_ };
  static constexpr std::array<ScratchBuffer, count_> scratch(int width, int columns) {
    std::array<ScratchBuffer, count_> s{};
    auto const inner = chain_type::scratch(width, columns);
    for (std::size_t i = 0; i < chain_scratch; ++i) s[i] = inner[i];
    s[lengths_] = {1, columns, ScratchBuffer::Keep::kept_float};
    s[positions_] = {1, columns * MaxLen, ScratchBuffer::Keep::temporary};
    s[packed_gradient_] = {Hidden, columns * MaxLen, ScratchBuffer::Keep::temporary};
    return s;
  }

  Bert() : Bert(BertOptions{}) {}
  explicit Bert(BertOptions options)
      : options_(options), chain_(make_chain(options, std::make_index_sequence<std::size_t(Layers)>{})) {}

  [[nodiscard]] BertOptions const& options() const { return options_; }
  [[nodiscard]] chain_type const& chain() const { return chain_; }

  void initialize(float* params, int width, Rng& rng) const { chain_.initialize(params, width, rng); }

  // On the CPU the encoder runs on the real tokens only, packed one sample after another
  // (the padding is never computed: nothing reads it, since attention masks it and the
  // pooler reads the first token); its output is then spread back to MaxLen columns per
  // sample, zero at the padding. On a device it runs padded and masked (forward_padded).
  template <class B>
  void forward(float const* params, ConstMatrixView x, MatrixView y, Scratch scratch, ForwardContext const& context) const {
    if constexpr (std::is_same_v<B, CpuBackend>) forward_packed<B>(params, x, y, scratch, context);
    else forward_padded<B>(params, x, y, scratch, context);
  }

  // The real tokens of the samples x, which the host's forward computes, packed (nn::PacksColumns).
  [[nodiscard]] std::size_t packed_columns(ConstMatrixView x) const {
    std::size_t tokens = 0;
    for (int s = 0; s < x.cols; ++s) tokens += std::size_t(sequence_length(x, s, options_.pad_id));
    return tokens;
  }

  // After a forward on the host (nn::scratch_in_use): the chain's buffers hold the real
  // tokens' columns from their start, and the chain says what of those its layers wrote.
  void scratch_in_use(Scratch scratch, std::span<std::size_t> floats) const {
    for (std::size_t k = chain_scratch; k < count_; ++k) floats[k] = scratch[k].size();
    MatrixView const lengths = scratch[lengths_];
    int tokens = 0;
    for (int s = 0; s < lengths.cols; ++s) tokens += int(lengths.data[s]);
    auto const views = packed(scratch, tokens);
    nn::scratch_in_use(chain_, Scratch(views), floats.first(chain_scratch));
  }

  template <class B>
  void backward(float const* params, float* grads, ConstMatrixView x, ConstMatrixView y, Scratch scratch,
                ConstMatrixView dy, MatrixView dx, bool accumulate) const {
    if constexpr (std::is_same_v<B, CpuBackend>) backward_packed<B>(params, grads, x, y, scratch, dy, dx, accumulate);
    else backward_padded<B>(params, grads, x, y, scratch, dy, dx, accumulate);
  }

 private:
  template <class B>
  void forward_packed(float const* params, ConstMatrixView x, MatrixView y, Scratch scratch,
                      ForwardContext const& context) const {
    MatrixView const lengths = scratch[lengths_], positions = scratch[positions_];
    int tokens = 0;
    for (int s = 0; s < x.cols; ++s) {
      int const n = sequence_length(x, s, options_.pad_id);
      lengths.data[s] = float(n);
      for (int t = 0; t < n; ++t) positions.data[tokens++] = float((context.first_sample + s) * MaxLen + t);
    }
    ForwardContext inner = context;
    inner.sequence_lengths = lengths.data;
    inner.column_positions = positions.data;
    auto const views = packed(scratch, tokens);
    chain_.template forward<B>(params, x, MatrixView{y.data, y.rows, tokens}, Scratch(views), inner);
    for (int s = x.cols - 1; s >= 0; --s) {  // spread out, last sample first: a column only moves right
      std::size_t const n = std::size_t(lengths.data[s]);
      tokens -= int(n);
      float* to = y.data + std::size_t(s) * MaxLen * Hidden;
      std::copy_backward(y.data + std::size_t(tokens) * Hidden, y.data + (std::size_t(tokens) + n) * Hidden, to + n * Hidden);
      std::fill(to + n * Hidden, to + std::size_t(MaxLen) * Hidden, 0.0f);
    }
  }

  template <class B>
  void backward_packed(float const* params, float* grads, ConstMatrixView x, ConstMatrixView y, Scratch scratch,
                       ConstMatrixView dy, MatrixView dx, bool accumulate) const {
    MatrixView const lengths = scratch[lengths_];
    float* packed_dy = scratch[packed_gradient_].data;
    int tokens = 0;
    for (int s = 0; s < x.cols; ++s) {
      std::size_t const n = std::size_t(lengths.data[s]);
      float const* from = dy.data + std::size_t(s) * MaxLen * Hidden;
      std::copy_n(from, n * Hidden, packed_dy + std::size_t(tokens) * Hidden);
      tokens += int(n);
    }
    auto const views = packed(scratch, tokens);
    // The last layer (a LayerNorm) does not read its output, which here is spread out.
    chain_.template backward<B>(params, grads, x, ConstMatrixView{y.data, y.rows, tokens}, Scratch(views),
                                ConstMatrixView{packed_dy, Hidden, tokens}, dx, accumulate);
  }

  // On a device: every column computed, the lengths (counted there) mask attention's keys,
  // and the padding's output and gradient are zero, as packing leaves them.
  template <class B>
  void forward_padded(float const* params, ConstMatrixView x, MatrixView y, Scratch scratch,
                      ForwardContext const& context) const {
    MatrixView const lengths = scratch[lengths_];
    BertPadding<B>::lengths(x, lengths, options_.pad_id);
    ForwardContext inner = context;
    inner.sequence_lengths = lengths.data;
    inner.column_positions = nullptr;  // column j is token j % MaxLen of its sample, as the CPU's positions say
    auto const views = packed(scratch, x.cols * MaxLen);
    chain_.template forward<B>(params, x, y, Scratch(views), inner);
    BertPadding<B>::zero_padding(y, y, lengths.data, MaxLen);
  }

  template <class B>
  void backward_padded(float const* params, float* grads, ConstMatrixView x, ConstMatrixView y, Scratch scratch,
                       ConstMatrixView dy, MatrixView dx, bool accumulate) const {
    MatrixView const masked_dy{scratch[packed_gradient_].data, Hidden, dy.cols};
    BertPadding<B>::zero_padding(dy, masked_dy, scratch[lengths_].data, MaxLen);
    auto const views = packed(scratch, x.cols * MaxLen);
    chain_.template backward<B>(params, grads, x, y, Scratch(views), masked_dy, dx, accumulate);
  }

  // The chain's scratch views for `tokens` packed columns: a buffer of so many columns per
  // token keeps its rows and gets that many columns per packed token; a per-sample one is
  // left as it is.
  static constexpr auto chain_specs = chain_type::scratch(MaxLen, 1);
  static std::array<MatrixView, chain_scratch> packed(Scratch scratch, int tokens) {
    std::array<MatrixView, chain_scratch> views{};
    for (std::size_t i = 0; i < chain_scratch; ++i) {
      views[i] = scratch[i];
      int const per_sample = chain_specs[i].columns_per_sample;
      if (per_sample % MaxLen == 0) views[i].cols = per_sample / MaxLen * tokens;
    }
    return views;
  }

  template <std::size_t... I>
  static chain_type make_chain(BertOptions const& o, std::index_sequence<I...>) {
    return chain_type(Embedding<Vocab, Hidden, MaxLen>{o.init_stddev, o.pad_id}, LayerNorm{o.layer_norm_epsilon},
                      Dropout{o.hidden_dropout}, (void(I), make_bert_layer<Hidden, Heads, Intermediate>(o))...);
  }

  BertOptions options_;
  chain_type chain_;
};

template <class B>
struct FirstTokenMath {
  static_assert(policy::dependent_false<B>, "strata::FirstToken: no math for this backend; include its device header (strata/cuda.hpp for Cuda)");
};
template <class B>
  requires std::same_as<B, CpuBackend>
struct FirstTokenMath<B> {
  static void forward(ConstMatrixView x, int tokens, MatrixView y) {
    for (int s = 0; s < y.cols; ++s)
      std::copy_n(x.data + std::size_t(s) * std::size_t(tokens) * std::size_t(x.rows), x.rows,
                  y.data + std::size_t(s) * std::size_t(y.rows));
  }
  static void backward(ConstMatrixView dy, int tokens, MatrixView dx) {
    std::fill_n(dx.data, dx.size(), 0.0f);
    for (int s = 0; s < dy.cols; ++s)
      std::copy_n(dy.data + std::size_t(s) * std::size_t(dy.rows), dy.rows,
                  dx.data + std::size_t(s) * std::size_t(tokens) * std::size_t(dx.rows));
  }
};

// Each sample's first token ([CLS]) of its MaxLen: one column per sample again.
template <int Width, int MaxLen>
struct FirstToken : ParameterFreeLayer {
  static constexpr int input_width = Width;
  static constexpr int output_columns(int columns) { return columns / MaxLen; }
  static std::string name() { return "FirstToken<" + std::to_string(Width) + ", " + std::to_string(MaxLen) + ">"; }
  template <class B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    FirstTokenMath<B>::forward(x, MaxLen, y);
  }
  template <class B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView, Scratch, ConstMatrixView dy, MatrixView dx,
                bool) const {
    if (dx.data != nullptr) FirstTokenMath<B>::backward(dy, MaxLen, dx);
  }
};

// BERT's pooler: tanh(Dense(first token)).
template <int Hidden, int MaxLen>
using BertPooler = Chain<FirstToken<Hidden, MaxLen>, Dense<Hidden, Hidden>, Tanh>;

}  // namespace strata::nn
