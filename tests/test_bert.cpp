// BERT: loading Hugging Face checkpoints (config checks, name mapping, transposed kernels,
// skipped buffers, F16/BF16 widening, every refusal), a tiny BERT fine-tuned by the trainer
// on one replica and on Mirrored<2>, and ("real data:" cases, skipped without the files)
// all-MiniLM-L6-v2 against PyTorch + transformers running the same files
// (tests/reference/minilm_reference.safetensors, made by tests/python/make_bert_reference.py).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <map>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "marker_sequences.hpp"
#include "message_of.hpp"
#include "real_data_main.hpp"
#include "strata.hpp"
#include "strata/io/huggingface.hpp"
#include "strata/text.hpp"
#include "temp_dir.hpp"

using namespace strata;

namespace {

// Columns of MaxLen tokens back into one column per sample (a reshape: the memory is the
// same), so that a test can read Bert's last hidden state as a model's output.
template <int Width, int MaxLen>
struct Fold : nn::ParameterFreeLayer {
  static constexpr int input_width = Width;
  static constexpr int output_width(int) { return Width * MaxLen; }
  static constexpr int output_columns(int columns) { return columns / MaxLen; }
  static std::string name() { return "Fold"; }
  template <class B>
  void forward(float const*, ConstMatrixView x, MatrixView y, nn::Scratch, nn::ForwardContext const&) const {
    std::copy_n(x.data, x.size(), y.data);
  }
  template <class B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView, nn::Scratch, ConstMatrixView dy, MatrixView dx,
                bool) const {
    if (dx.data) std::copy_n(dy.data, dy.size(), dx.data);
  }
};

using TinyBert = Bert<2, 8, 2, 12, 23, 6>;
using Tiny = Sequential<TinyBert, BertPooler<8, 6>, Dense<8, 3>>;

std::string tiny_config(int hidden = 8, char const* act = "gelu") {
  return "{\"architectures\": [\"BertModel\"], \"hidden_act\": \"" + std::string(act) + "\", \"hidden_size\": " +
         std::to_string(hidden) +
         ", \"intermediate_size\": 12, \"max_position_embeddings\": 10, \"model_type\": \"bert\", "
         "\"num_attention_heads\": 2, \"num_hidden_layers\": 2, \"type_vocab_size\": 2, \"vocab_size\": 23}";
}

// A safetensors file as other tools write it: no strata metadata, tensors of any dtype.
struct RawTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};
void write_raw_safetensors(std::filesystem::path const& path, std::vector<RawTensor> const& tensors) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}", data;
  for (auto const& t : tensors) {
    header += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i) header += ',';
      header += std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(data.size()) + "," + std::to_string(data.size() + t.bytes.size()) + "]}";
    data += t.bytes;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::ofstream out(path, std::ios::binary);
  std::uint64_t const n = header.size();
  out.write(reinterpret_cast<char const*>(&n), 8);
  out << header << data;
}
std::string float_bytes(std::vector<float> const& v) { return {reinterpret_cast<char const*>(v.data()), v.size() * 4}; }

// The Hugging Face checkpoint of `model`'s Bert and pooler: each strata tensor under its
// Hugging Face name, kernels transposed to (out, in), the position table widened to 10
// rows, plus the I64 position_ids buffer and another task's head.
std::vector<RawTensor> as_huggingface(Tiny const& model) {
  std::map<std::string, nn::ParameterTensor> strata_tensors;
  for (auto const& t : Tiny::parameter_tensors()) strata_tensors.emplace(t.name, t);
  std::vector<RawTensor> out;
  for (auto const& m : io::detail::bert_tensor_names(2, "", true)) {
    auto const& t = strata_tensors.at(m.target);
    float const* p = model.parameters().data() + t.offset;
    std::vector<float> values(p, p + nn::element_count(t.shape));
    std::vector<std::int64_t> shape = t.shape;
    if (m.transpose) {  // strata's column-major out x in is (in, out) row-major: transpose
      auto const in = t.shape[0], o = t.shape[1];
      for (std::int64_t r = 0; r < o; ++r)
        for (std::int64_t c = 0; c < in; ++c) values[std::size_t(r * in + c)] = p[std::size_t(c * o + r)];
      shape = {o, in};
    }
    if (m.target.ends_with("position_embeddings")) {
      values.resize(10 * 8, 0.5f);
      shape = {10, 8};
    }
    out.push_back({m.source, "F32", shape, float_bytes(values)});
  }
  std::string ids(10 * 8, '\0');
  for (std::int64_t i = 0; i < 10; ++i) std::memcpy(ids.data() + 8 * i, &i, 8);
  out.push_back({"embeddings.position_ids", "I64", {1, 10}, ids});
  out.push_back({"classifier.weight", "F32", {2, 8}, float_bytes(std::vector<float>(16, 1.0f))});
  return out;
}

void write_folder(std::filesystem::path const& dir, std::string const& config, std::vector<RawTensor> const& tensors) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << config;
  write_raw_safetensors(dir / "model.safetensors", tensors);
}

Matrix token_ids(std::vector<std::vector<int>> const& samples, int max_length) {
  Matrix m = Matrix::Zero(max_length, Eigen::Index(samples.size()));
  for (std::size_t s = 0; s < samples.size(); ++s)
    for (std::size_t t = 0; t < samples[s].size(); ++t) m(Eigen::Index(t), Eigen::Index(s)) = float(samples[s][t]);
  return m;
}


}  // namespace

TEST_CASE("a Hugging Face checkpoint (no strata metadata, (out, in) weights, I64 buffer, other heads) loads exactly") {
  TempDir dir;
  Tiny source(1);
  write_folder(dir.path / "hf", tiny_config(), as_huggingface(source));
  Tiny loaded(2);
  auto const report = io::load_huggingface_bert(loaded, dir.path / "hf");
  CHECK(report.loaded.size() == 5 + 2 * 16 + 2);
  REQUIRE(report.skipped.size() == 2);
  CHECK(report.skipped[0].first == "embeddings.position_ids");
  CHECK(report.skipped[0].second.find("I64") != std::string::npos);
  CHECK(report.skipped[1].first == "classifier.weight");
  // Bert and pooler now equal the source's; the head kept its own initialisation.
  Matrix const x = token_ids({{2, 7, 9, 3}, {2, 11, 21, 17, 3}}, 6);
  using Encoder = Sequential<TinyBert, BertPooler<8, 6>>;
  Encoder a(3), b(4);
  std::copy_n(source.parameters().data(), Encoder::arena_size, a.parameters().data());
  std::copy_n(loaded.parameters().data(), Encoder::arena_size, b.parameters().data());
  CHECK((a.predict(x) - b.predict(x)).cwiseAbs().maxCoeff() == 0.0f);
  CHECK(std::equal(loaded.parameters().begin() + Encoder::arena_size, loaded.parameters().end(),
                   Tiny(2).parameters().begin() + Encoder::arena_size));
}

TEST_CASE("F16 and BF16 tensors are widened to float; integer tensors the model needs are refused") {
  TempDir dir;
  Tiny source(1);
  auto tensors = as_huggingface(source);
  for (auto& t : tensors)
    if (t.name == "embeddings.LayerNorm.weight") {  // 8 values as BF16: the top half of each float
      std::vector<float> v(8);
      std::memcpy(v.data(), t.bytes.data(), 32);
      std::string half(16, '\0');
      for (int i = 0; i < 8; ++i) {
        std::uint32_t bits;
        std::memcpy(&bits, &v[std::size_t(i)], 4);
        std::uint16_t top = std::uint16_t(bits >> 16);
        std::memcpy(half.data() + 2 * i, &top, 2);
      }
      t.dtype = "BF16";
      t.bytes = half;
    }
  write_folder(dir.path / "bf16", tiny_config(), tensors);
  Tiny loaded(2);
  io::load_huggingface_bert(loaded, dir.path / "bf16");
  auto const gamma = Tiny::parameter_tensors()[3];
  REQUIRE(gamma.name == "bert_0/layer_norm_1/gamma");
  for (std::size_t i = 0; i < 8; ++i)
    CHECK(loaded.parameters()[gamma.offset + i] == float(bf16(source.parameters()[gamma.offset + i])));

  for (auto& t : tensors)
    if (t.name == "pooler.dense.bias") {
      t.dtype = "I32";
    }
  write_folder(dir.path / "int", tiny_config(), tensors);
  auto const what = message_of([&] { io::load_huggingface_bert(loaded, dir.path / "int"); });
  CHECK(what.find("tensor 'pooler.dense.bias' has dtype I32") != std::string::npos);
}

TEST_CASE("a config or checkpoint that differs from the model type is an error naming the field or tensor and both values") {
  TempDir dir;
  Tiny source(1), target(2);
  write_folder(dir.path / "wide", tiny_config(16), as_huggingface(source));
  CHECK(message_of([&] { io::load_huggingface_bert(target, dir.path / "wide"); }) ==
        (dir.path / "wide" / "config.json").string() +
            ": hidden_size is 16 but the model type Bert<2, 8, 2, 12, 23, 6> has Hidden = 8; make the type match the checkpoint");
  write_folder(dir.path / "relu", tiny_config(8, "relu"), as_huggingface(source));
  CHECK(message_of([&] { io::load_huggingface_bert(target, dir.path / "relu"); }).find("hidden_act is \"relu\"") !=
        std::string::npos);

  auto missing = as_huggingface(source);
  std::erase_if(missing, [](RawTensor const& t) { return t.name == "encoder.layer.1.intermediate.dense.weight"; });
  write_folder(dir.path / "missing", tiny_config(), missing);
  auto const gone = message_of([&] { io::load_huggingface_bert(target, dir.path / "missing"); });
  CHECK(gone.find("tensor 'encoder.layer.1.intermediate.dense.weight' is missing; the model needs it with shape [12, 8]") !=
        std::string::npos);

  auto misshapen = as_huggingface(source);
  for (auto& t : misshapen)
    if (t.name == "encoder.layer.0.attention.self.key.weight") t.shape = {4, 16};
  write_folder(dir.path / "shape", tiny_config(), misshapen);
  auto const shape = message_of([&] { io::load_huggingface_bert(target, dir.path / "shape"); });
  CHECK(shape.find("tensor 'encoder.layer.0.attention.self.key.weight' has shape [4, 16], the model expects [8, 8]") !=
        std::string::npos);
  std::vector<float> const before(target.parameters().begin(), target.parameters().end());
  CHECK(message_of([&] { io::load_huggingface_bert(target, dir.path / "absent"); }).find("no such folder") != std::string::npos);
  CHECK(std::equal(before.begin(), before.end(), target.parameters().begin()));  // a refused folder changes nothing
}

TEST_CASE("a small BERT trains with the trainer, and Mirrored<2> trains it as one replica does") {
  auto const [ids, classes] = marker_sequences(96);
  data::Dataset const data(ids, classes);
  // CI's configuration: 2 layers, hidden 64, 4 heads, random initialisation.
  using Small = Bert<2, 64, 4, 128, 23, 6>;
  auto train = [&]<class T>(T trainer, int epochs) {
    Sequential<Small, BertPooler<64, 6>, Dense<64, 2>> model(7);
    auto history = trainer.fit(model, AdamW{.lr = 5e-3f}, SoftmaxCrossEntropy{}, data,
                               {.epochs = epochs, .batch_size = 16, .seed = 3});
    return std::pair{Vector(Eigen::Map<Vector const>(model.parameters().data(), Eigen::Index(model.parameters().size()))),
                     history};
  };
  auto const [one, history] = train(Trainer<OneDevice>{}, 2);
  auto const [two, unused] = train(Trainer<Mirrored<2>>{}, 2);
  // The two differ only in the order of float sums (a replica's half-batch, then the
  // all-reduce), 1e-7 relative per sum; AdamW divides every gradient by its running RMS, so
  // over 12 steps that grows to 3.6e-6 (x86-64-v3), 6.7e-6 (release, AVX-512) and 1.4e-5
  // (ASan) here. A lost or doubled shard would differ by orders of magnitude more.
  MESSAGE("relative difference ", (two - one).norm() / one.norm());
  CHECK((two - one).norm() / one.norm() < 5e-5);
  CHECK(history["loss"].back() < history["loss"].front());
}

TEST_CASE("Bert under mixed precision: bf16 storage of the packed activations keeps the gradients close to float") {
  using Small = Sequential<Bert<2, 64, 4, 128, 23, 6>, BertPooler<64, 6>, Dense<64, 2>>;
  Small model(5);
  Rng rng(6);
  int const n = 40;  // ten chunks of 4 samples of 6 tokens in bf16
  Matrix ids = Matrix::Zero(6, n), classes(1, n);
  for (int s = 0; s < n; ++s) {
    int const length = 2 + int(rng() % 5);
    for (int t = 0; t < length; ++t) ids(t, s) = float(t == 0 ? 2 : (t + 1 == length ? 3 : 5 + int(rng() % 18)));
    classes(0, s) = float(s % 2);
  }
  nn::ForwardContext const training{.training = true, .seed = 11, .first_sample = 0};
  std::vector<float> grads[2];
  int k = 0;
  auto run = [&](auto& ws) {
    model.forward(ws, model.parameters().data(), view(ids), training);
    SoftmaxCrossEntropy{}.forward_backward<CpuBackend>(ws.output(), view(classes), ws.output_gradient(), 1.0f);
    model.backward(ws, model.parameters().data(), model.gradients().data(), view(ids), false);
    grads[k++].assign(model.gradients().begin(), model.gradients().end());
  };
  Small::Workspace<CpuBackend> full(n);
  Small::Workspace<CpuBackend, bf16> half(n);
  run(full);
  run(half);
  Eigen::Map<Vector const> g32(grads[0].data(), Eigen::Index(grads[0].size())), g16(grads[1].data(), Eigen::Index(grads[1].size()));
  CHECK((g16 - g32).norm() / g32.norm() < 0.05);
  CHECK((g16 - g32).norm() > 0.0);  // it really ran in 16 bits
  CHECK(half.activation_bytes() < full.activation_bytes());
}

namespace {
// Bert storing every column of its scratch under mixed precision, padding included: the
// pass as it was before layers said what of their scratch they write (nn::scratch_in_use).
template <class B>
struct EveryColumn : B {
  using B::B;
  void scratch_in_use(nn::Scratch scratch, std::span<std::size_t> floats) const {
    for (std::size_t k = 0; k < scratch.size(); ++k) floats[k] = scratch[k].size();
  }
};
// Bert not saying how many columns it packs (nn::PacksColumns): chunks of padded samples.
template <class B>
struct PaddedChunks : B {
  using B::B;
  std::size_t packed_columns(ConstMatrixView) const = delete;
};
static_assert(nn::PacksColumns<Bert<1, 16, 2, 32, 23, 64>> && !nn::PacksColumns<PaddedChunks<Bert<1, 16, 2, 32, 23, 64>>>);

// Gradients of two mixed-precision steps (the second finds the first one's values in the
// chunks' float scratch), and the chunks of the last forward.
template <class Model>
std::pair<std::vector<float>, std::vector<typename Model::template Workspace<CpuBackend, bf16>::Chunk>> mixed_gradients(
    Model& model, Matrix const& ids, Matrix const& classes) {
  nn::ForwardContext const training{.training = true, .seed = 13, .first_sample = 0};
  typename Model::template Workspace<CpuBackend, bf16> ws(int(ids.cols()));
  for (int step = 0; step < 2; ++step) {
    model.forward(ws, model.parameters().data(), view(ids), training);
    SoftmaxCrossEntropy{}.forward_backward<CpuBackend>(ws.output(), view(classes), ws.output_gradient(), 1.0f);
    model.backward(ws, model.parameters().data(), model.gradients().data(), view(ids), step > 0);
  }
  return {{model.gradients().begin(), model.gradients().end()}, {ws.chunks().begin(), ws.chunks().end()}};
}
}  // namespace

TEST_CASE("Bert under mixed precision: chunks of as many samples as their real tokens fit, only those tokens' "
          "activations kept, the gradients bit for bit those of keeping every column") {
  using Encoder = Bert<1, 16, 2, 32, 23, 64>;  // 64 tokens: a chunk holds 4 samples of padding (256 columns)
  using Packed = Sequential<Encoder, BertPooler<16, 64>, Dense<16, 2>>;
  static_assert(Packed::Workspace<CpuBackend, bf16>::chunk_samples == 4);
  static_assert(Packed::Workspace<CpuBackend, bf16>::chunk_samples_most == 16);
  Rng rng(8);
  int const n = 45;
  Matrix ids = Matrix::Zero(64, n), classes(1, n);
  std::vector<int> lengths(n);
  for (int s = 0; s < n; ++s) {
    lengths[std::size_t(s)] = s % 9 == 4 ? 64 : 1 + int(rng() % 24);  // short sentences, and a full one now and then
    for (int t = 0; t < lengths[std::size_t(s)]; ++t) ids(t, s) = float(t == 0 ? 2 : 5 + int(rng() % 18));
    classes(0, s) = float(s % 2);
  }
  Packed packed(5);
  Sequential<EveryColumn<Encoder>, BertPooler<16, 64>, Dense<16, 2>> every_column(5);
  Sequential<PaddedChunks<Encoder>, BertPooler<16, 64>, Dense<16, 2>> padded_chunks(5);
  REQUIRE(std::equal(packed.parameters().begin(), packed.parameters().end(), every_column.parameters().begin()));
  auto const [a, chunks] = mixed_gradients(packed, ids, classes);
  auto const [b, same_chunks] = mixed_gradients(every_column, ids, classes);
  auto const [c, padded] = mixed_gradients(padded_chunks, ids, classes);

  // The chunks cover the batch in order; each holds at least 4 samples (but the last), at
  // most 16, and its real tokens fit in 4 samples' padding; the packing made them fewer.
  int next = 0;
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    auto const& chunk = chunks[k];
    CHECK(chunk.first == next);
    CHECK(chunk.samples <= 16);
    if (k + 1 < chunks.size()) CHECK(chunk.samples >= 4);
    std::size_t tokens = 0;
    for (int s = chunk.first; s < chunk.first + chunk.samples; ++s) tokens += std::size_t(lengths[std::size_t(s)]);
    CHECK(chunk.packed == tokens);
    if (chunk.samples > 4) CHECK(tokens <= 256);
    next += chunk.samples;
  }
  CHECK(next == n);
  CHECK(padded.size() == 12);  // ceil(45 / 4)
  CHECK(chunks.size() < 8);
  MESSAGE(chunks.size(), " chunks of packed samples, ", padded.size(), " of padded ones");

  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  CHECK(std::any_of(a.begin(), a.end(), [](float g) { return g != 0.0f; }));
  // Against chunks of padded samples: the same values rounded to bf16 at the same places; only
  // the weight gradients' float sums over the chunks group differently.
  Eigen::Map<Vector const> packed_chunks(a.data(), Eigen::Index(a.size())), padded_chunk(c.data(), Eigen::Index(c.size()));
  MESSAGE("relative difference from chunks of padded samples ", (packed_chunks - padded_chunk).norm() / padded_chunk.norm());
  CHECK((packed_chunks - padded_chunk).norm() / padded_chunk.norm() < 1e-5);
}

TEST_CASE("attention's probabilities and mask are in use for n x n floats per head of a sample of n tokens") {
  using Attention = nn::SelfAttention<8, 2>;
  constexpr auto specs = Attention::scratch(8, 6);
  std::vector<std::vector<float>> storage;
  std::vector<MatrixView> views;
  for (auto const& b : specs) {
    storage.emplace_back(std::size_t(b.rows) * std::size_t(b.columns_per_sample) * 3);
    views.push_back({storage.back().data(), b.rows, b.columns_per_sample * 3});
  }
  views[6].data[0] = 4, views[6].data[1] = 1, views[6].data[2] = 6;  // the kept lengths of 3 samples
  std::vector<std::size_t> floats(views.size());
  nn::scratch_in_use(Attention{}, nn::Scratch(views), floats);
  CHECK(floats[4] == 2 * (16 + 1 + 36));  // probabilities
  CHECK(floats[5] == 2 * (16 + 1 + 36));  // their dropout mask
  CHECK(floats[0] == 8 * 18);             // Q: the whole view
  CHECK(floats[6] == 3);
}

// ---------------------------------------------------------------- real data

namespace {
std::filesystem::path reference_file() {
  return std::filesystem::path(STRATA_TEST_REFERENCE_DIR) / "minilm_reference.safetensors";
}
using MiniLM = Bert<6, 384, 12, 1536, 30522, 24>;
}  // namespace

TEST_CASE("real data: all-MiniLM-L6-v2 loaded by strata matches PyTorch + transformers within 1e-4") {
  auto const reference = io::SafetensorsFile::read(reference_file());
  auto const ids = reference.floats("input_ids", {4, 24});
  Matrix const x = Eigen::Map<Matrix const>(ids.data(), 24, 4);  // [4, 24] row-major is 24 x 4 column-major

  // The tokenizer gives the reference's ids for the same sentences.
  auto const tokenizer = data::BertTokenizer::from_directory(data::minilm_directory());
  auto const first = tokenizer.encode(std::vector<std::string>{"bad ."}, 24, 1);
  for (int t = 0; t < 24; ++t) CHECK(float(first.ids[std::size_t(t)]) == x(t, 2));

  Sequential<MiniLM, Fold<384, 24>> encoder(1);
  auto const report = io::load_huggingface_bert(encoder, data::minilm_directory());
  CHECK(report.loaded.size() == 101);  // 103 F32 tensors, less the pooler this model does not have
  Matrix const hidden = encoder.predict(x, 4);
  auto const expected = reference.floats("last_hidden_state", {4, 24, 384});
  auto const mask = reference.floats("attention_mask", {4, 24});
  Eigen::Map<Matrix const> const want(expected.data(), 384 * 24, 4);
  // Every real token's state; strata does not compute the padding's (nothing reads it), and
  // reports zeros there.
  double error = 0.0;
  int tokens = 0;
  for (int s = 0; s < 4; ++s)
    for (int t = 0; t < 24; ++t) {
      Vector const got = hidden.col(s).segment(t * 384, 384);
      Vector const ref = want.col(s).segment(t * 384, 384);
      if (mask[std::size_t(s * 24 + t)] == 1.0f) {
        error = std::max(error, double((got - ref).cwiseAbs().maxCoeff()));
        ++tokens;
      } else {
        CHECK(got.cwiseAbs().maxCoeff() == 0.0f);
      }
    }
  MESSAGE("largest difference in the last hidden state over " << tokens << " tokens: " << error);
  CHECK(tokens > 40);
  CHECK(error < 1e-4);

  Sequential<MiniLM, BertPooler<384, 24>> pooled(1);
  io::load_huggingface_bert(pooled, data::minilm_directory());
  auto const pooler = reference.floats("pooler_output", {4, 384});
  Eigen::Map<Matrix const> const pooler_want(pooler.data(), 384, 4);
  CHECK((pooled.predict(x, 4) - pooler_want).cwiseAbs().maxCoeff() < 1e-4);
}

TEST_CASE("real data: config.json of all-MiniLM-L6-v2 refuses a model type of other sizes") {
  Sequential<Bert<6, 384, 12, 1536, 30522, 600>, BertPooler<384, 600>> too_long(1);
  CHECK(message_of([&] { io::load_huggingface_bert(too_long, data::minilm_directory()); })
            .find("max_position_embeddings is 512, fewer than the model type's MaxLen = 600") != std::string::npos);
  Sequential<Bert<4, 384, 12, 1536, 30522, 24>, BertPooler<384, 24>> shallow(1);
  CHECK(message_of([&] { io::load_huggingface_bert(shallow, data::minilm_directory()); })
            .find("num_hidden_layers is 6 but the model type Bert<4, 384, 12, 1536, 30522, 24> has Layers = 4") !=
        std::string::npos);
}

STRATA_REAL_DATA_MAIN({strata::data::minilm_directory() / "model.safetensors", reference_file()})
