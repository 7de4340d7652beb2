#pragma once
// Loading Hugging Face BERT checkpoints (safetensors files that strata did not write) into a
// model whose first layer is a strata::Bert, and its second, where it has one, a
// BertPooler:
//
//   auto report = strata::io::load_huggingface_bert(model, strata::data::minilm_directory());
//
// config.json is checked against the model's type first: layers, hidden size, heads,
// intermediate size, vocabulary, token types, positions (at least MaxLen), the activation
// (gelu) and absolute positions; any difference is a ConfigError naming the field and both
// values. Then every tensor the model needs must be in the file with its shape (else an
// IoError or ShapeError naming the tensor and both shapes). Hugging Face's Linear weights are
// (out, in) and are transposed into strata's kernels; the position table's first MaxLen rows
// are taken; F16 and BF16 tensors are widened to float. Tensors the model has no use for
// (the I64 position_ids buffer, another task's head) are skipped and listed in the report.
// Layers after the pooler (a classification head) keep their own initialisation.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/data/file_reader.hpp"
#include "strata/io/json.hpp"
#include "strata/io/safetensors.hpp"
#include "strata/nn/bert.hpp"
#include "strata/nn/layer.hpp"

namespace strata::io {

struct HuggingFaceReport {
  std::vector<std::string> loaded;                             // Hugging Face names, in file order
  std::vector<std::pair<std::string, std::string>> skipped;   // name, why
};

namespace detail {

template <class T>
struct is_bert : std::false_type {};
template <int Layers, int Hidden, int Heads, int Intermediate, int Vocab, int MaxLen>
struct is_bert<nn::Bert<Layers, Hidden, Heads, Intermediate, Vocab, MaxLen>> : std::true_type {};

template <class T>
struct is_bert_pooler : std::false_type {};
template <int Hidden, int MaxLen>
struct is_bert_pooler<nn::BertPooler<Hidden, MaxLen>> : std::true_type {};

// One Hugging Face tensor and where it goes: the strata tensor's name, and whether the
// source is an (out, in) Linear weight to transpose into a kernel.
struct TensorMapping {
  std::string source, target;
  bool transpose = false;
};

// The Hugging Face names of BertModel's tensors (under `prefix`, "" or "bert.") against the
// strata names of a Bert that is layer 0 of a model, and of a pooler that is layer 1.
inline std::vector<TensorMapping> bert_tensor_names(int layers, std::string const& prefix, bool pooler) {
  std::vector<TensorMapping> m;
  std::string const e = prefix + "embeddings.", b = "bert_0/";
  m.push_back({e + "word_embeddings.weight", b + "embedding_0/word_embeddings"});
  m.push_back({e + "position_embeddings.weight", b + "embedding_0/position_embeddings"});
  m.push_back({e + "token_type_embeddings.weight", b + "embedding_0/token_type_embeddings"});
  m.push_back({e + "LayerNorm.weight", b + "layer_norm_1/gamma"});
  m.push_back({e + "LayerNorm.bias", b + "layer_norm_1/beta"});
  for (int i = 0; i < layers; ++i) {
    std::string const h = prefix + "encoder.layer." + std::to_string(i) + ".";
    std::string const s = b + "block_" + std::to_string(3 + i) + "/";  // after the embedding, its LayerNorm and Dropout
    for (char const* p : {"query", "key", "value"}) {
      m.push_back({h + "attention.self." + p + ".weight", s + "residual_0/attention_0/" + p + "/kernel", true});
      m.push_back({h + "attention.self." + p + ".bias", s + "residual_0/attention_0/" + p + "/bias"});
    }
    m.push_back({h + "attention.output.dense.weight", s + "residual_0/attention_0/output/kernel", true});
    m.push_back({h + "attention.output.dense.bias", s + "residual_0/attention_0/output/bias"});
    m.push_back({h + "attention.output.LayerNorm.weight", s + "layer_norm_1/gamma"});
    m.push_back({h + "attention.output.LayerNorm.bias", s + "layer_norm_1/beta"});
    m.push_back({h + "intermediate.dense.weight", s + "residual_2/dense_0/kernel", true});
    m.push_back({h + "intermediate.dense.bias", s + "residual_2/dense_0/bias"});
    m.push_back({h + "output.dense.weight", s + "residual_2/dense_2/kernel", true});
    m.push_back({h + "output.dense.bias", s + "residual_2/dense_2/bias"});
    m.push_back({h + "output.LayerNorm.weight", s + "layer_norm_3/gamma"});
    m.push_back({h + "output.LayerNorm.bias", s + "layer_norm_3/beta"});
  }
  if (pooler) {
    m.push_back({prefix + "pooler.dense.weight", "block_1/dense_1/kernel", true});
    m.push_back({prefix + "pooler.dense.bias", "block_1/dense_1/bias"});
  }
  return m;
}

}  // namespace detail

// config.json of a BertModel against the type Bert: a ConfigError naming the first field
// that differs, or that is missing, with both values.
template <class BertType>
void check_bert_config(std::filesystem::path const& config_path) {
  std::string const source = config_path.string();
  auto const config = json::parse(data::read_file(config_path), source);
  if (!config.is_object()) throw IoError(strata::detail::message(source, ": not a JSON object"));
  auto integer = [&](char const* key) {
    auto const* v = config.find(key);
    std::uint64_t value = 0;
    if (!v || !v->as_size(value, 1u << 30))
      throw ConfigError(strata::detail::message(source, ": \"", key, "\" is missing or not a non-negative integer"));
    return std::int64_t(value);
  };
  auto expect = [&](char const* key, std::int64_t type_value, char const* type_parameter) {
    std::int64_t const found = integer(key);
    if (found != type_value)
      throw ConfigError(strata::detail::message(source, ": ", key, " is ", found, " but the model type ", BertType::name(),
                                                " has ", type_parameter, " = ", type_value, "; make the type match the checkpoint"));
  };
  expect("num_hidden_layers", BertType::layers, "Layers");
  expect("hidden_size", BertType::hidden, "Hidden");
  expect("num_attention_heads", BertType::heads, "Heads");
  expect("intermediate_size", BertType::intermediate, "Intermediate");
  expect("vocab_size", BertType::vocab, "Vocab");
  expect("type_vocab_size", 2, "token types (fixed)");
  if (integer("max_position_embeddings") < BertType::max_length)
    throw ConfigError(strata::detail::message(source, ": max_position_embeddings is ", integer("max_position_embeddings"),
                                              ", fewer than the model type's MaxLen = ", BertType::max_length));
  auto text = [&](char const* key, char const* wanted, char const* fallback) {
    auto const* v = config.find(key);
    std::string const found = v && v->is_string() ? v->text : fallback;
    if (found != wanted)
      throw ConfigError(strata::detail::message(source, ": ", key, " is \"", found, "\"; strata's Bert has \"", wanted, "\""));
  };
  text("hidden_act", "gelu", "(missing)");
  text("position_embedding_type", "absolute", "absolute");
}

// Reads `directory`/config.json and `directory`/model.safetensors into `model` (see above).
template <class Model>
HuggingFaceReport load_huggingface_bert(Model& model, std::filesystem::path const& directory) {
  using First = std::remove_cvref_t<decltype(model.template layer<0>())>;
  static_assert(detail::is_bert<First>::value,
                "strata::io::load_huggingface_bert: the model's first layer must be a strata::Bert<...>");
  constexpr bool has_pooler = [] {
    if constexpr (Model::widths.size() > 2)
      return detail::is_bert_pooler<std::remove_cvref_t<decltype(std::declval<Model&>().template layer<1>())>>::value;
    else return false;
  }();
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec))
    throw IoError(strata::detail::message(directory.string(), ": no such folder; a Hugging Face model folder has "
                                          "config.json and model.safetensors (scripts/fetch-bert-data brings all-MiniLM-L6-v2)"));
  check_bert_config<First>(directory / "config.json");
  auto const file = SafetensorsFile::read(directory / "model.safetensors");

  auto const names = file.names();
  std::set<std::string> const present(names.begin(), names.end());
  std::string const prefix = present.count("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  std::map<std::string, nn::ParameterTensor> targets;
  for (auto& t : Model::parameter_tensors()) targets.emplace(t.name, t);

  HuggingFaceReport report;
  std::set<std::string> used;
  float* params = model.parameters().data();
  for (auto const& m : detail::bert_tensor_names(First::layers, prefix, has_pooler)) {
    auto const target = targets.find(m.target);
    if (target == targets.end())
      throw ConfigError(strata::detail::message("load_huggingface_bert: strata tensor '", m.target, "' for '", m.source,
                                                "' is not in ", Model::name(), " (a strata bug: please report it)"));
    auto const& shape = target->second.shape;  // strata's: a kernel is (in, out)
    if (!present.count(m.source))
      throw IoError(strata::detail::message(file.source(), ": tensor '", m.source, "' is missing; the model needs it with shape ",
                                            detail::shape_text(m.transpose ? std::vector<std::int64_t>{shape[1], shape[0]} : shape)));
    float* out = params + target->second.offset;
    if (m.transpose) {
      auto const rows = shape[1], cols = shape[0];  // Hugging Face's (out, in)
      auto const values = file.floats(m.source, {rows, cols});
      // Row-major (out, in) into strata's column-major out x in block.
      for (std::int64_t o = 0; o < rows; ++o)
        for (std::int64_t i = 0; i < cols; ++i) out[std::size_t(i) * std::size_t(rows) + std::size_t(o)] = values[std::size_t(o * cols + i)];
    } else if (m.target.ends_with("position_embeddings")) {
      auto const found = file.shape(m.source);
      if (found.size() != 2 || found[1] != shape[1] || found[0] < shape[0])
        throw ShapeError(strata::detail::message(file.source(), ": tensor '", m.source, "' has shape ", detail::shape_text(found),
                                                 ", the model expects [at least ", shape[0], ", ", shape[1], "]"));
      auto const values = file.floats(m.source, found);
      std::copy_n(values.begin(), nn::element_count(shape), out);
    } else {
      auto const values = file.floats(m.source, shape);
      std::copy(values.begin(), values.end(), out);
    }
    used.insert(m.source);
  }
  for (auto const& name : names) {
    if (used.count(name)) report.loaded.push_back(name);
    else if (name.ends_with("position_ids")) report.skipped.emplace_back(name, "a buffer of position indices (" + file.dtype(name) + "), not a parameter");
    else report.skipped.emplace_back(name, "not a parameter of " + Model::name());
  }
  return report;
}

}  // namespace strata::io
