#pragma once
// BERT's WordPiece tokenizer as a `vocab.txt` and `tokenizer_config.json` define it, giving
// the ids Hugging Face's `tokenizers` gives (its BertNormalizer, BertPreTokenizer, WordPiece
// and [CLS] ... [SEP] template), and encoding a whole data set on several threads.
//
//   1. clean: drop NUL, U+FFFD and control, format and private-use characters except tab,
//      LF and CR (unassigned code points stay, and become [UNK], as in the reference); any
//      whitespace becomes a space
//   2. put spaces around CJK ideographs, so that each is a word
//   3. strip accents (NFD, then drop non-spacing marks): by default when lowercasing
//   4. lowercase
//   5. split at whitespace, and around every punctuation character (Unicode P*, and the
//      ASCII symbols such as $ + < = > ^ ` | ~)
//   0. a special token written in the text ([CLS], [SEP], [PAD], [UNK], [MASK]) is that
//      token, as the reference's added vocabulary does; the steps below run between them
//   6. WordPiece: the longest vocabulary entry from the start of the word, then the longest
//      "##" entry from where it ended, and so on; a word with a part not in the vocabulary,
//      or longer than 100 characters, is [UNK]
//
// Invalid UTF-8 is a DataError naming the text and the byte offset. (The reference tools
// work on Python strings, which cannot hold invalid UTF-8; replacing bytes silently would
// tokenize something the user never wrote.)

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/data/dataset.hpp"
#include "strata/data/file_reader.hpp"
#include "strata/data/unicode.hpp"
#include "strata/io/json.hpp"

namespace strata::data {

struct BertTokenizerOptions {
  bool lowercase = true;
  std::optional<bool> strip_accents{};  // unset: strip when lowercasing (tokenizer_config's null)
  bool clean_text = true;
  bool tokenize_chinese_chars = true;
  std::size_t max_input_chars_per_word = 100;
  std::string unk_token = "[UNK]", cls_token = "[CLS]", sep_token = "[SEP]", pad_token = "[PAD]";
  std::string mask_token = "[MASK]";  // optional: matched in text only where the vocabulary has it
};

// A data set's sequences, each [CLS] tokens... [SEP] truncated to and padded up to
// max_length: row-major count x max_length.
struct Encodings {
  std::size_t count = 0, max_length = 0;
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> attention_mask;  // 1 for a token, 0 for padding
  std::vector<std::int32_t> lengths;         // tokens before the padding, [CLS] and [SEP] included

  std::span<std::int32_t const> ids_of(std::size_t i) const { return {ids.data() + i * max_length, max_length}; }
  std::span<std::uint8_t const> mask_of(std::size_t i) const { return {attention_mask.data() + i * max_length, max_length}; }

  // The sequences as a model's input (one column of max_length ids per sequence, as floats:
  // what Embedding and Bert read) with one class label each.
  Dataset to_dataset(std::span<int const> labels) const {
    if (labels.size() != count)
      throw DataError(strata::detail::message("Encodings::to_dataset: ", labels.size(), " labels for ", count, " sequences"));
    Matrix features(static_cast<Eigen::Index>(max_length), static_cast<Eigen::Index>(count));
    std::copy(ids.begin(), ids.end(), features.data());
    return {std::move(features), std::vector<std::int32_t>(labels.begin(), labels.end())};
  }
};

class BertTokenizer {
 public:
  // `vocabulary[id]` is the token with that id (vocab.txt's lines in order).
  explicit BertTokenizer(std::vector<std::string> vocabulary, BertTokenizerOptions options = {})
      : vocabulary_(std::move(vocabulary)), options_(std::move(options)) {
    if (vocabulary_.empty()) throw ConfigError("BertTokenizer: the vocabulary is empty");
    if (vocabulary_.size() > std::size_t(INT32_MAX))
      throw ConfigError(strata::detail::message("BertTokenizer: ", vocabulary_.size(), " tokens do not fit 32-bit ids"));
    if (options_.max_input_chars_per_word == 0)
      throw ConfigError("BertTokenizerOptions: max_input_chars_per_word must be at least 1");
    ids_.reserve(vocabulary_.size());
    for (std::size_t i = 0; i < vocabulary_.size(); ++i) ids_[vocabulary_[i]] = std::int32_t(i);  // a repeated token: the last id, as the reference does
    unk_ = special(options_.unk_token, "unk_token");
    cls_ = special(options_.cls_token, "cls_token");
    sep_ = special(options_.sep_token, "sep_token");
    pad_ = special(options_.pad_token, "pad_token");
    for (auto const& token : {options_.unk_token, options_.cls_token, options_.sep_token, options_.pad_token, options_.mask_token})
      if (std::int32_t const found = id(token); found >= 0 && !token.empty()) specials_.emplace_back(token, found);
  }

  // vocab.txt and, where present, tokenizer_config.json (do_lower_case, strip_accents,
  // tokenize_chinese_chars and the special tokens) from a model folder.
  static BertTokenizer from_directory(std::filesystem::path const& directory) {
    auto const vocab_path = directory / "vocab.txt";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(vocab_path, ec))
      throw IoError(strata::detail::message(vocab_path.string(), ": no such file; a BERT model folder has vocab.txt ",
                                            "(scripts/fetch-bert-data brings all-MiniLM-L6-v2's)"));
    std::string const text = read_file(vocab_path);
    std::vector<std::string> vocabulary;
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::size_t stop = end;
      if (stop > pos && text[stop - 1] == '\r') --stop;
      vocabulary.emplace_back(text.substr(pos, stop - pos));
      pos = end + 1;
    }
    BertTokenizerOptions options;
    auto const config_path = directory / "tokenizer_config.json";
    if (std::filesystem::is_regular_file(config_path, ec)) options = options_from_config(read_file(config_path), config_path.string());
    return BertTokenizer(std::move(vocabulary), std::move(options));
  }

  // tokenizer_config.json's settings; a tokenizer class other than BERT's is refused.
  static BertTokenizerOptions options_from_config(std::string const& json_text, std::string const& source) {
    auto const config = io::json::parse(json_text, source);
    if (!config.is_object()) throw IoError(strata::detail::message(source, ": not a JSON object"));
    BertTokenizerOptions options;
    auto flag = [&](char const* key, auto&& assign) {
      auto const* v = config.find(key);
      if (!v || v->kind == io::json::Value::Kind::null) return;
      if (v->kind != io::json::Value::Kind::boolean)
        throw IoError(strata::detail::message(source, ": \"", key, "\" must be true, false or null"));
      assign(v->boolean);
    };
    flag("do_lower_case", [&](bool b) { options.lowercase = b; });
    flag("strip_accents", [&](bool b) { options.strip_accents = b; });
    flag("tokenize_chinese_chars", [&](bool b) { options.tokenize_chinese_chars = b; });
    auto token = [&](char const* key, std::string& into) {
      auto const* v = config.find(key);
      if (v && v->is_object()) v = v->find("content");  // newer files: {"content": "[UNK]", ...}
      if (!v || v->kind == io::json::Value::Kind::null) return;
      if (!v->is_string()) throw IoError(strata::detail::message(source, ": \"", key, "\" must be a string"));
      into = v->text;
    };
    token("unk_token", options.unk_token);
    token("cls_token", options.cls_token);
    token("sep_token", options.sep_token);
    token("pad_token", options.pad_token);
    token("mask_token", options.mask_token);
    if (auto const* cls = config.find("tokenizer_class"); cls && cls->is_string() && !cls->text.starts_with("BertTokenizer"))
      throw ConfigError(strata::detail::message(source, ": tokenizer_class is \"", cls->text,
                                                "\"; BertTokenizer reads BERT's WordPiece (BertTokenizer, BertTokenizerFast)"));
    return options;
  }

  std::size_t vocab_size() const { return vocabulary_.size(); }
  BertTokenizerOptions const& options() const { return options_; }
  std::int32_t unk_id() const { return unk_; }
  std::int32_t cls_id() const { return cls_; }
  std::int32_t sep_id() const { return sep_; }
  std::int32_t pad_id() const { return pad_; }

  // The id of `token`, or -1 when the vocabulary lacks it.
  std::int32_t id(std::string_view token) const {
    auto const it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
  }
  std::string const& token(std::int32_t id) const {
    if (id < 0 || std::size_t(id) >= vocabulary_.size())
      throw DataError(strata::detail::message("BertTokenizer::token: id ", id, " is outside the vocabulary of ",
                                              vocabulary_.size()));
    return vocabulary_[std::size_t(id)];
  }

  // Steps 1-4: the text each word is cut from.
  std::string normalize(std::string_view text) const {
    std::u32string chars;
    normalize_into(text, chars, "text");
    std::string out;
    for (char32_t c : chars) unicode::append_utf8(out, c);
    return out;
  }

  // The word pieces of `text`, without [CLS] and [SEP].
  std::vector<std::string> tokenize(std::string_view text) const {
    std::vector<std::string> pieces;
    for (std::int32_t id : token_ids(text)) pieces.push_back(vocabulary_[std::size_t(id)]);
    return pieces;
  }

  // The ids of `text`'s word pieces, without [CLS] and [SEP]; `what` names the text in errors.
  std::vector<std::int32_t> token_ids(std::string_view text, std::string_view what = "text") const {
    std::vector<std::int32_t> ids;
    Scratch scratch;
    append_ids(text, what, ids, scratch);
    return ids;
  }

  // Every text as [CLS] pieces... [SEP], truncated to `max_length` (the pieces past
  // max_length - 2 are dropped) and padded with [PAD] up to it, on `threads` threads
  // (0: one per core). The result does not depend on the number of threads.
  Encodings encode(std::span<std::string const> texts, std::size_t max_length, unsigned threads = 0) const {
    if (max_length < 2)
      throw ConfigError(strata::detail::message("BertTokenizer::encode: max_length ", max_length,
                                                " leaves no room for [CLS] and [SEP]; use at least 2"));
    Encodings out;
    out.count = texts.size();
    out.max_length = max_length;
    out.ids.assign(texts.size() * max_length, pad_);
    out.attention_mask.assign(texts.size() * max_length, 0);
    out.lengths.assign(texts.size(), 0);
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    threads = unsigned(std::min<std::size_t>(threads, std::max<std::size_t>(1, texts.size() / 64)));
    auto encode_range = [&](std::size_t begin, std::size_t end) {
      Scratch scratch;
      std::vector<std::int32_t> ids;
      for (std::size_t i = begin; i < end; ++i) {
        ids.clear();
        ids.push_back(cls_);
        append_ids(texts[i], scratch.name_of(i), ids, scratch);
        if (ids.size() > max_length - 1) ids.resize(max_length - 1);
        ids.push_back(sep_);
        std::ranges::copy(ids, out.ids.begin() + std::ptrdiff_t(i * max_length));
        std::fill_n(out.attention_mask.begin() + std::ptrdiff_t(i * max_length), ids.size(), std::uint8_t{1});
        out.lengths[i] = std::int32_t(ids.size());
      }
    };
    if (threads <= 1) {
      encode_range(0, texts.size());
      return out;
    }
    std::vector<std::exception_ptr> errors(threads);
    {
      std::vector<std::jthread> workers;
      for (unsigned t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
          try {
            encode_range(texts.size() * t / threads, texts.size() * (t + 1) / threads);
          } catch (...) {
            errors[t] = std::current_exception();
          }
        });
    }
    for (auto const& e : errors)  // the first text's error, whichever thread met it first
      if (e) std::rethrow_exception(e);
    return out;
  }
  Encodings encode(std::vector<std::string> const& texts, std::size_t max_length, unsigned threads = 0) const {
    return encode(std::span<std::string const>(texts), max_length, threads);
  }

 private:
  // Transparent hashing: look up a std::string_view without building a std::string.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };

  struct Scratch {
    std::u32string chars;
    std::string word, candidate, name;
    std::string_view name_of(std::size_t i) {
      name = "text " + std::to_string(i);
      return name;
    }
  };

  std::int32_t special(std::string const& token, char const* role) const {
    std::int32_t const found = id(token);
    if (found < 0)
      throw ConfigError(strata::detail::message("BertTokenizer: the ", role, " '", token,
                                                "' is not in the vocabulary; check vocab.txt or set BertTokenizerOptions::",
                                                role));
    return found;
  }

  static bool is_cjk_ideograph(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
  }

  void normalize_into(std::string_view text, std::u32string& chars, std::string_view what, std::size_t base = 0) const {
    unicode::decode_utf8(text, chars, what, base);
    std::u32string cleaned;
    cleaned.reserve(chars.size() + 8);
    for (char32_t c : chars) {
      if (options_.clean_text) {
        bool const kept_control = c == U'\t' || c == U'\n' || c == U'\r';
        if (c == 0 || c == 0xFFFD || (!kept_control && unicode::is_assigned_other(c))) continue;
        if (unicode::is_whitespace(c)) c = U' ';
      }
      if (options_.tokenize_chinese_chars && is_cjk_ideograph(c)) {
        cleaned += U' ';
        cleaned += c;
        cleaned += U' ';
      } else {
        cleaned += c;
      }
    }
    if (options_.strip_accents.value_or(options_.lowercase)) {
      unicode::nfd(cleaned);
      std::erase_if(cleaned, unicode::is_nonspacing_mark);
    }
    if (options_.lowercase) {
      chars.clear();
      for (char32_t c : cleaned) unicode::append_lowercase(chars, c);
    } else {
      chars = std::move(cleaned);
    }
  }

  // Step 0, then steps 1-6 on the text between special tokens.
  void append_ids(std::string_view text, std::string_view what, std::vector<std::int32_t>& ids, Scratch& s) const {
    std::size_t pos = 0;
    for (;;) {
      std::size_t at = std::string_view::npos, length = 0;
      std::int32_t special_id = -1;
      for (auto const& [token, token_id] : specials_) {  // the first, and the longest of those starting there
        auto const found = text.find(token, pos);
        if (found < at || (found == at && found != std::string_view::npos && token.size() > length)) {
          at = found;
          length = token.size();
          special_id = token_id;
        }
      }
      append_text_ids(text.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos), what, pos, ids, s);
      if (at == std::string_view::npos) return;
      ids.push_back(special_id);
      pos = at + length;
    }
  }

  void append_text_ids(std::string_view text, std::string_view what, std::size_t base, std::vector<std::int32_t>& ids,
                       Scratch& s) const {
    normalize_into(text, s.chars, what, base);
    std::size_t word_chars = 0;
    auto finish_word = [&] {
      if (word_chars > 0) append_word_pieces(s.word, word_chars, ids, s.candidate);
      s.word.clear();
      word_chars = 0;
    };
    for (char32_t c : s.chars) {
      if (unicode::is_whitespace(c)) {
        finish_word();
      } else if (unicode::is_ascii_punctuation(c) || (c >= 0x80 && unicode::is_punctuation(c))) {
        finish_word();
        unicode::append_utf8(s.word, c);
        word_chars = 1;
        finish_word();
      } else {
        unicode::append_utf8(s.word, c);
        ++word_chars;
      }
    }
    finish_word();
  }

  // Greedy longest-match-first over one word (UTF-8, `chars` characters long).
  void append_word_pieces(std::string_view word, std::size_t chars, std::vector<std::int32_t>& ids,
                          std::string& candidate) const {
    if (chars > options_.max_input_chars_per_word) {
      ids.push_back(unk_);
      return;
    }
    auto const first = ids.size();
    std::size_t start = 0;
    while (start < word.size()) {
      std::size_t end = word.size();
      std::int32_t found = -1;
      while (end > start) {
        candidate.assign(start > 0 ? "##" : "");
        candidate.append(word.substr(start, end - start));
        if (auto const it = ids_.find(std::string_view(candidate)); it != ids_.end()) {
          found = it->second;
          break;
        }
        do --end;  // back one character: skip UTF-8 continuation bytes
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        ids.resize(first);
        ids.push_back(unk_);
        return;
      }
      ids.push_back(found);
      start = end;
    }
  }

  std::vector<std::string> vocabulary_;
  std::unordered_map<std::string, std::int32_t, Hash, std::equal_to<>> ids_;
  BertTokenizerOptions options_;
  std::vector<std::pair<std::string, std::int32_t>> specials_;
  std::int32_t unk_ = 0, cls_ = 0, sep_ = 0, pad_ = 0;
};

// Where scripts/fetch-bert-data puts all-MiniLM-L6-v2 (weights, config and vocabulary);
// STRATA_MINILM_DIR overrides it.
inline std::filesystem::path minilm_directory() {
  if (char const* dir = std::getenv("STRATA_MINILM_DIR")) return dir;
  return "/usr/local/share/strata/all-minilm-l6-v2";
}

}  // namespace strata::data
