#pragma once
// The examples' command lines: pairs of `--flag value`. Every value is read whole, so "abc"
// or "10x" for a number, a flag without its value, or a flag the example does not take ends
// the example before it reads any data, with a line that names what was wrong and the flags
// it takes (exit code 2). std::atoi would have read "abc" as 0 and "10x" as 10.

#include <charconv>
#include <iostream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace examples {

// Why a command line was not taken.
struct BadCommandLine {
  std::string message;
};

// One flag's value, as written.
class FlagValue {
 public:
  FlagValue(std::string_view flag, std::string_view text) : flag_(flag), text_(text) {}

  [[nodiscard]] std::string text() const { return std::string(text_); }

  // The value as a Number (an integer or floating-point type), all of it.
  template <class Number>
  [[nodiscard]] Number number() const {
    static_assert(std::is_arithmetic_v<Number>);
    Number value{};
    char const* const end = text_.data() + text_.size();
    auto const [stop, error] = std::from_chars(text_.data(), end, value);
    if (text_.empty() || error != std::errc{} || stop != end) {
      char const* const kind = std::is_integral_v<Number> ? "a whole number" : "a number";
      throw BadCommandLine{std::string(flag_) + ": '" + std::string(text_) + "' is not " + kind +
                           (error == std::errc::result_out_of_range ? " in range" : "")};
    }
    return value;
  }

 private:
  std::string_view flag_, text_;
};

// Calls take(flag, value) for each pair of argv, in order; take returns false for a flag it
// does not know. Returns whether the whole command line was taken; where it was not, it has
// printed why and `usage` (the flags the example takes) to standard error.
template <class Take>
bool read_flags(int argc, char** argv, std::string_view usage, Take&& take) {
  try {
    for (int i = 1; i < argc; i += 2) {
      std::string_view const flag = argv[i];
      if (i + 1 == argc) throw BadCommandLine{std::string(flag) + " has no value"};
      if (!take(flag, FlagValue(flag, argv[i + 1]))) throw BadCommandLine{"unknown flag " + std::string(flag)};
    }
    return true;
  } catch (BadCommandLine const& bad) {
    std::cerr << "error: " << bad.message << "; use " << usage << '\n';
    return false;
  }
}

}  // namespace examples
