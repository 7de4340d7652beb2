#pragma once
// CSV files of numbers (optionally gzip-compressed): one sample per line, one column of
// them the label or target. Errors give the path, line, column and byte offset.

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/data/dataset.hpp"
#include "strata/data/file_reader.hpp"

namespace strata::data {

struct CsvOptions {
  int label_column = -1;     // which column is the target; negative counts from the end (-1 = last)
  bool header = false;       // skip the first line
  char delimiter = ',';
};

inline Dataset parse_csv(std::string const& text, std::string const& path, CsvOptions const& options = {}) {
  std::vector<float> values;
  std::size_t columns = 0, rows = 0, line = 1, pos = 0;
  if (options.header) {
    pos = text.find('\n');
    pos = pos == std::string::npos ? text.size() : pos + 1;
    line = 2;
  }
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::size_t stop = end;
    if (stop > pos && text[stop - 1] == '\r') --stop;
    if (stop > pos) {  // blank lines are skipped
      std::size_t fields = 0, field_start = pos;
      for (;;) {
        std::size_t field_end = text.find(options.delimiter, field_start);
        if (field_end == std::string::npos || field_end > stop) field_end = stop;
        std::string const field = text.substr(field_start, field_end - field_start);
        char* parsed_end = nullptr;
        errno = 0;
        float const v = std::strtof(field.c_str(), &parsed_end);
        bool const blank_tail = parsed_end && std::string_view(parsed_end).find_first_not_of(" \t") == std::string_view::npos;
        if (field.empty() || parsed_end == field.c_str() || !blank_tail || errno == ERANGE)
          throw IoError(strata::detail::message(path, ": line ", line, ", column ", fields + 1, " (byte offset ", field_start,
                                        "): '", field, "' is not a number"));
        values.push_back(v);
        ++fields;
        if (field_end == stop) break;
        field_start = field_end + 1;
      }
      if (rows == 0) columns = fields;
      else if (fields != columns)
        throw IoError(strata::detail::message(path, ": line ", line, " (byte offset ", pos, ") has ", fields,
                                      " fields, the first row has ", columns,
                                      end == text.size() ? "; the file looks truncated" : ""));
      ++rows;
    }
    pos = end + 1;
    ++line;
  }
  if (rows == 0) throw IoError(strata::detail::message(path, ": byte offset ", text.size(), ": no data rows"));
  if (columns < 2) throw IoError(strata::detail::message(path, ": rows have ", columns, " field; need features and a label"));
  int const label = options.label_column < 0 ? int(columns) + options.label_column : options.label_column;
  if (label < 0 || label >= int(columns))
    throw ConfigError(strata::detail::message("CsvOptions: label_column ", options.label_column, " is outside the ", columns,
                                      " columns of ", path));
  Matrix features(Eigen::Index(columns - 1), Eigen::Index(rows));
  Matrix targets(1, Eigen::Index(rows));
  for (std::size_t r = 0; r < rows; ++r) {
    Eigen::Index f = 0;
    for (std::size_t c = 0; c < columns; ++c) {
      float const v = values[r * columns + c];
      if (int(c) == label) targets(0, Eigen::Index(r)) = v;
      else features(f++, Eigen::Index(r)) = v;
    }
  }
  return {std::move(features), std::move(targets)};
}

inline Dataset read_csv(std::filesystem::path const& path, CsvOptions const& options = {}) {
  return parse_csv(read_file(path), path.string(), options);
}

// Several files of the same columns as one dataset, in the order given (for example, one
// worker's files under AutoShard::file: strategy::files_for_worker).
inline Dataset read_csv(std::vector<std::filesystem::path> const& paths, CsvOptions const& options = {}) {
  if (paths.empty()) throw DataError("read_csv: no files given");
  std::vector<Dataset> parts;
  Eigen::Index samples = 0;
  for (auto const& path : paths) {
    parts.push_back(read_csv(path, options));
    if (parts.back().feature_width() != parts.front().feature_width())
      throw DataError(strata::detail::message("read_csv: ", path.string(), " has ", parts.back().feature_width(),
                                              " feature columns but ", paths.front().string(), " has ",
                                              parts.front().feature_width(), "; the files must have the same columns"));
    samples += Eigen::Index(parts.back().size());
  }
  Matrix features(parts.front().feature_width(), samples), targets(parts.front().target_width(), samples);
  Eigen::Index at = 0;
  for (auto const& part : parts) {
    auto const n = Eigen::Index(part.size());
    features.middleCols(at, n) = strata::detail::eigen(part.features());
    targets.middleCols(at, n) = strata::detail::eigen(part.targets());
    at += n;
  }
  return {std::move(features), std::move(targets)};
}

}  // namespace strata::data
