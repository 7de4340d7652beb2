#pragma once
// Labelled text: sentences with a class each, read from a CSV file's text and label columns;
// a seeded, stratified train/dev split; and the sentence polarity data of the BERT case study
// (Pang & Lee's 4,000 movie-review sentences, 2,000 positive and 2,000 negative).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/core/random.hpp"
#include "strata/data/csv.hpp"
#include "strata/data/file_reader.hpp"

namespace strata::data {

struct TextDataset {
  std::vector<std::string> texts;
  std::vector<int> labels;  // class indices 0 .. classes-1, one per text

  std::size_t size() const { return texts.size(); }

  // The samples at `indices`, in that order.
  TextDataset subset(std::span<std::size_t const> indices) const {
    TextDataset out;
    out.texts.reserve(indices.size());
    out.labels.reserve(indices.size());
    for (std::size_t i : indices) {
      if (i >= size())
        throw DataError(strata::detail::message("TextDataset::subset: index ", i, " is outside the ", size(), " samples"));
      out.texts.push_back(texts[i]);
      out.labels.push_back(labels[i]);
    }
    return out;
  }
};

struct TextCsvOptions {
  int text_column = 1;
  int label_column = 0;
  // The label column's values in class order: "-1" and "1" as {"-1", "1"} become classes 0
  // and 1. Empty: the labels are already the integers 0, 1, ...
  std::vector<std::string> classes{};
  bool header = false;  // skip the first record
  char delimiter = ',';
};

inline TextDataset parse_text_csv(std::string const& text, std::string const& path, TextCsvOptions const& options = {}) {
  if (options.text_column < 0 || options.label_column < 0 || options.text_column == options.label_column)
    throw ConfigError(strata::detail::message("TextCsvOptions: text_column ", options.text_column, " and label_column ",
                                              options.label_column, " must be two different columns counted from 0"));
  auto const needed = std::size_t(std::max(options.text_column, options.label_column)) + 1;
  TextDataset out;
  bool skip = options.header;
  for_each_csv_record(text, path, options.delimiter, [&](CsvRecord const& record) {
    if (std::exchange(skip, false)) return;
    if (record.fields.size() < needed)
      throw IoError(strata::detail::message(path, ": line ", record.line, " (byte offset ", record.offset, ") has ",
                                            record.fields.size(), " fields; the text and label columns need ", needed));
    auto const c = std::size_t(options.label_column);
    std::string const& value = record.fields[c];
    int label = -1;
    if (options.classes.empty()) {
      char* end = nullptr;
      long const v = std::strtol(value.c_str(), &end, 10);
      if (!value.empty() && end && *end == '\0' && v >= 0 && v < (1L << 30)) label = int(v);
    } else {
      auto const it = std::ranges::find(options.classes, value);
      if (it != options.classes.end()) label = int(it - options.classes.begin());
    }
    if (label < 0) {
      std::string expected = "a class index 0, 1, ...";
      if (!options.classes.empty()) {
        expected = "one of";
        for (auto const& name : options.classes) expected += " '" + name + "'";
      }
      throw IoError(strata::detail::message(path, ": line ", record.line, ", column ", c + 1, " (byte offset ",
                                            record.field_offsets[c], "): label '", value, "' is not ", expected));
    }
    out.texts.push_back(record.fields[std::size_t(options.text_column)]);
    out.labels.push_back(label);
  });
  if (out.size() == 0) throw IoError(strata::detail::message(path, ": no data rows"));
  return out;
}

inline TextDataset read_text_csv(std::filesystem::path const& path, TextCsvOptions const& options = {}) {
  return parse_text_csv(read_file(path), path.string(), options);
}

// A train/dev split that keeps each class's share: within every class, a seeded shuffle
// (the same on every machine and standard library) puts round(dev_fraction x count) samples
// in dev. Both lists are in ascending index order.
struct SplitIndices {
  std::vector<std::size_t> train, dev;
};

inline SplitIndices stratified_split(std::span<int const> labels, double dev_fraction, std::uint64_t seed) {
  if (!(dev_fraction > 0.0 && dev_fraction < 1.0))
    throw ConfigError(strata::detail::message("stratified_split: dev_fraction ", dev_fraction, " must lie in (0, 1)"));
  int classes = 0;
  for (int label : labels) {
    if (label < 0) throw DataError(strata::detail::message("stratified_split: label ", label, " is negative"));
    classes = std::max(classes, label + 1);
  }
  SplitIndices split;
  for (int c = 0; c < classes; ++c) {
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < labels.size(); ++i)
      if (labels[i] == c) members.push_back(i);
    Rng rng(mix64(seed, std::uint64_t(c)));
    for (std::size_t i = members.size(); i > 1; --i) std::swap(members[i - 1], members[rng() % i]);  // Fisher-Yates
    auto const dev = std::size_t(double(members.size()) * dev_fraction + 0.5);
    split.dev.insert(split.dev.end(), members.begin(), members.begin() + std::ptrdiff_t(dev));
    split.train.insert(split.train.end(), members.begin() + std::ptrdiff_t(dev), members.end());
  }
  std::ranges::sort(split.train);
  std::ranges::sort(split.dev);
  return split;
}

// Where scripts/fetch-bert-data puts the sentence polarity file; STRATA_SENTENCE_POLARITY
// overrides it.
inline std::filesystem::path sentence_polarity_file() {
  if (char const* file = std::getenv("STRATA_SENTENCE_POLARITY")) return file;
  return "/usr/local/share/strata/sentence-polarity/polarity-en-pang&lee2.csv";
}

// Pang & Lee's sentences, negative = class 0, positive = class 1, in file order.
inline TextDataset sentence_polarity(std::filesystem::path const& file = sentence_polarity_file()) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw IoError(strata::detail::message(file.string(), ": no such file; scripts/fetch-bert-data (run by scripts/setup) "
                                          "brings it, or set STRATA_SENTENCE_POLARITY to where it is"));
  return read_text_csv(file, {.text_column = 1, .label_column = 0, .classes = {"-1", "1"}});
}

}  // namespace strata::data
