#pragma once
// CSV files (RFC 4180, optionally gzip-compressed): a UTF-8 byte-order mark is skipped,
// fields may be quoted, quotes inside them doubled, line breaks inside them kept. Numbers
// (one column the label or target) become a Dataset; text columns a TextDataset
// (text_dataset.hpp). Errors give the path, line, column and byte offset.

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/data/dataset.hpp"
#include "strata/data/file_reader.hpp"

namespace strata::data {

// One record: its fields unquoted, where it starts and where each field starts.
struct CsvRecord {
  std::size_t line = 0;    // 1-based, counting the line breaks inside quoted fields too
  std::size_t offset = 0;  // byte offset of the record's first character
  std::vector<std::string> fields;
  std::vector<std::size_t> field_offsets;
};

// Calls visit(CsvRecord const&) for each non-blank record, in order. A quote that is never
// closed, or text between a closing quote and the next delimiter, is an IoError.
template <class Visit>
void for_each_csv_record(std::string_view text, std::string const& path, char delimiter, Visit&& visit) {
  std::size_t pos = text.starts_with("\xEF\xBB\xBF") ? 3 : 0, line = 1;
  CsvRecord record;
  auto fail = [&](std::size_t at_line, std::size_t at, auto const&... what) {
    throw IoError(strata::detail::message(path, ": line ", at_line, " (byte offset ", at, "): ", what...));
  };
  while (pos < text.size()) {
    record.line = line;
    record.offset = pos;
    record.fields.clear();
    record.field_offsets.clear();
    bool end_of_record = false;
    while (!end_of_record) {
      std::size_t const start = pos, start_line = line;
      std::string field;
      if (pos < text.size() && text[pos] == '"') {
        for (++pos;; ++pos) {
          if (pos >= text.size()) fail(start_line, start, "a quoted field is never closed; the file looks truncated");
          char const c = text[pos];
          if (c == '"') {
            if (pos + 1 < text.size() && text[pos + 1] == '"') {
              field += '"';
              ++pos;
              continue;
            }
            ++pos;
            break;
          }
          if (c == '\n') ++line;
          field += c;
        }
        if (pos < text.size() && text[pos] == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n') ++pos;
        if (pos < text.size() && text[pos] != delimiter && text[pos] != '\n')
          fail(line, pos, "'", text[pos], "' after the closing quote of a field; a quote inside a quoted field is written twice");
      } else {
        std::size_t stop = pos;
        while (stop < text.size() && text[stop] != delimiter && text[stop] != '\n') ++stop;
        field.assign(text.substr(pos, stop - pos));
        if (field.find('"') != std::string::npos)
          fail(line, pos + field.find('"'), "a quote inside an unquoted field; quote the whole field");
        if (stop < text.size() && text[stop] == '\n' && !field.empty() && field.back() == '\r') field.pop_back();
        pos = stop;
      }
      record.fields.push_back(std::move(field));
      record.field_offsets.push_back(start);
      if (pos >= text.size() || text[pos] == '\n') end_of_record = true;
      ++pos;  // past the delimiter or the line break
    }
    bool const blank = record.fields.size() == 1 && record.fields[0].empty();
    if (!blank) visit(std::as_const(record));
    ++line;
  }
}

struct CsvOptions {
  int label_column = -1;     // which column is the target; negative counts from the end (-1 = last)
  bool header = false;       // skip the first record
  char delimiter = ',';
};

inline Dataset parse_csv(std::string const& text, std::string const& path, CsvOptions const& options = {}) {
  std::vector<float> values;
  std::size_t columns = 0, rows = 0;
  bool skip = options.header;
  for_each_csv_record(text, path, options.delimiter, [&](CsvRecord const& record) {
    if (std::exchange(skip, false)) return;
    for (std::size_t c = 0; c < record.fields.size(); ++c) {
      std::string const& field = record.fields[c];
      char* parsed_end = nullptr;
      errno = 0;
      float const v = std::strtof(field.c_str(), &parsed_end);
      bool const blank_tail = parsed_end && std::string_view(parsed_end).find_first_not_of(" \t") == std::string_view::npos;
      if (field.empty() || parsed_end == field.c_str() || !blank_tail || errno == ERANGE)
        throw IoError(strata::detail::message(path, ": line ", record.line, ", column ", c + 1, " (byte offset ",
                                              record.field_offsets[c], "): '", field, "' is not a number"));
      values.push_back(v);
    }
    if (rows == 0) columns = record.fields.size();
    else if (record.fields.size() != columns)
      throw IoError(strata::detail::message(path, ": line ", record.line, " (byte offset ", record.offset, ") has ",
                                            record.fields.size(), " fields, the first row has ", columns,
                                            text.find('\n', record.offset) == std::string::npos
                                                ? "; the file looks truncated" : ""));
    ++rows;
  });
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
