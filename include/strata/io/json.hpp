#pragma once
// The small, strict JSON reader and writer that checkpoint headers need. strata carries
// its own because nlohmann/json, which DESIGN.md names, adds about 3 s to the compile of
// every translation unit that includes strata.hpp (docs/checkpoints.md has the figures);
// the tests still use nlohmann/json as the independent parser.
//
// The reader accepts RFC 8259 JSON and nothing else, nests at most 64 deep, and reports
// the byte offset of the first error. Numbers are kept as their text; as_size() reads a
// non-negative integer exactly.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::io::json {

struct Value {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  std::string text;                                    // a string's contents, or a number as written
  std::vector<Value> items{};                          // array elements
  std::vector<std::pair<std::string, Value>> members{};  // object members, in file order

  [[nodiscard]] bool is_object() const { return kind == Kind::object; }
  [[nodiscard]] bool is_array() const { return kind == Kind::array; }
  [[nodiscard]] bool is_string() const { return kind == Kind::string; }
  // The member called `key`, or nullptr (the last one when a key repeats, as most readers do).
  [[nodiscard]] Value const* find(std::string_view key) const {
    Value const* found = nullptr;
    for (auto const& [name, value] : members)
      if (name == key) found = &value;
    return found;
  }
  // A non-negative integer no larger than `limit`, or false.
  [[nodiscard]] bool as_size(std::uint64_t& out, std::uint64_t limit = ~std::uint64_t{0}) const {
    if (kind != Kind::number || text.empty() || text.size() > 20) return false;
    std::uint64_t value = 0;
    for (char c : text) {
      if (c < '0' || c > '9') return false;
      auto const digit = std::uint64_t(c - '0');
      if (value > (limit - digit) / 10) return false;
      value = value * 10 + digit;
    }
    out = value;
    return true;
  }
};

namespace detail {

class Reader {
 public:
  Reader(std::string_view text, std::string const& source) : text_(text), source_(source) {}

  Value document() {
    Value v = value(0);
    skip_space();
    if (at_ != text_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  static constexpr int max_depth = 64;

  [[noreturn]] void fail(char const* what) const {
    throw IoError(strata::detail::message(source_, ": the JSON header is malformed at byte ", at_, ": ", what));
  }
  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
      ++at_;
  }
  bool eat(char c) {
    skip_space();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c, char const* what) {
    if (!eat(c)) fail(what);
  }
  bool literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  Value value(int depth) {
    if (depth > max_depth) fail("nested more than 64 deep");
    skip_space();
    if (at_ >= text_.size()) fail("the text ends where a value should start");
    Value v;
    char const c = text_[at_];
    if (c == '{') {
      ++at_;
      v.kind = Value::Kind::object;
      if (eat('}')) return v;
      do {
        skip_space();
        if (at_ >= text_.size() || text_[at_] != '"') fail("an object key must be a string");
        std::string key = string();
        expect(':', "expected ':' after an object key");
        v.members.emplace_back(std::move(key), value(depth + 1));
      } while (eat(','));
      expect('}', "expected ',' or '}' in an object");
    } else if (c == '[') {
      ++at_;
      v.kind = Value::Kind::array;
      if (eat(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (eat(','));
      expect(']', "expected ',' or ']' in an array");
    } else if (c == '"') {
      v.kind = Value::Kind::string;
      v.text = string();
    } else if (literal("true")) {
      v.kind = Value::Kind::boolean;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Value::Kind::boolean;
    } else if (literal("null")) {
    } else {
      v.kind = Value::Kind::number;
      v.text = number();
    }
    return v;
  }

  std::string number() {
    std::size_t const start = at_;
    auto digits = [&] {
      std::size_t const from = at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
      return at_ - from;
    };
    if (at_ < text_.size() && text_[at_] == '-') ++at_;
    std::size_t const first = at_;
    std::size_t const integer = digits();
    if (integer == 0) fail("expected a value");
    if (integer > 1 && text_[first] == '0') fail("a number has a leading zero");
    if (at_ < text_.size() && text_[at_] == '.') {
      ++at_;
      if (digits() == 0) fail("a number needs digits after '.'");
    }
    if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
      ++at_;
      if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) ++at_;
      if (digits() == 0) fail("a number needs digits in its exponent");
    }
    return std::string(text_.substr(start, at_ - start));
  }

  unsigned hex4() {
    if (at_ + 4 > text_.size()) fail("a \\u escape needs four hex digits");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      char const h = text_[at_++];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= unsigned(h - '0');
      else if (h >= 'a' && h <= 'f') code |= unsigned(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') code |= unsigned(h - 'A' + 10);
      else fail("a \\u escape needs four hex digits");
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += char(code);
    } else if (code < 0x800) {
      out += char(0xc0 | (code >> 6));
      out += char(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += char(0xe0 | (code >> 12));
      out += char(0x80 | ((code >> 6) & 0x3f));
      out += char(0x80 | (code & 0x3f));
    } else {
      out += char(0xf0 | (code >> 18));
      out += char(0x80 | ((code >> 12) & 0x3f));
      out += char(0x80 | ((code >> 6) & 0x3f));
      out += char(0x80 | (code & 0x3f));
    }
  }

  std::string string() {
    ++at_;  // the opening quote
    std::string out;
    for (;;) {
      if (at_ >= text_.size()) fail("a string is not closed");
      char const c = text_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) fail("a string is not closed");
      switch (char const e = text_[at_++]) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned code = hex4();
          if (code >= 0xd800 && code < 0xdc00) {  // a surrogate pair
            if (!literal("\\u")) fail("a lone UTF-16 surrogate");
            unsigned const low = hex4();
            if (low < 0xdc00 || low >= 0xe000) fail("a lone UTF-16 surrogate");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          } else if (code >= 0xdc00 && code < 0xe000) {
            fail("a lone UTF-16 surrogate");
          }
          append_utf8(out, code);
          break;
        }
        default: fail("an unknown escape in a string");
      }
    }
  }

  std::string_view text_;
  std::string const& source_;
  std::size_t at_ = 0;
};

}  // namespace detail

// Parses `text`; an error is an IoError naming `source` and the byte offset.
inline Value parse(std::string_view text, std::string const& source) { return detail::Reader(text, source).document(); }

// `s` as a JSON string literal, quotes included.
inline std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          static constexpr char hex[] = "0123456789abcdef";
          escaped[0] = '\\', escaped[1] = 'u', escaped[2] = '0', escaped[3] = '0';
          escaped[4] = hex[(c >> 4) & 0xf], escaped[5] = hex[c & 0xf], escaped[6] = 0;
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace strata::io::json
