#pragma once
// The examples' command lines: pairs of `--flag value`. Every value is read whole, so "abc"
// or "10x" for a number, a flag without its value, or a flag the example does not take ends
// the example before it reads any data, with a line that names what was wrong and the flags
// it takes (exit code 2). std::atoi would have read "abc" as 0 and "10x" as 10.

#include <charconv>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include <strata.hpp>

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

// The flags of the flagship and of its GPU twin (examples/gpu/fashion_mnist_gpu.cpp).
struct TrainingFlags {
  int epochs = 10;
  int batch_size = 128;
  std::string precision = "fp32";  // fp32, bf16 or fp16

  // The flags argv gives over `defaults`, or nothing where the command line was not taken
  // (read_flags said why).
  static std::optional<TrainingFlags> read(int argc, char** argv) { return read(argc, argv, TrainingFlags()); }
  static std::optional<TrainingFlags> read(int argc, char** argv, TrainingFlags defaults) {
    TrainingFlags flags = std::move(defaults);
    bool const taken = read_flags(argc, argv, "--epochs N --batch-size B --precision fp32|bf16|fp16",
                                  [&](std::string_view flag, FlagValue value) {
                                    if (flag == "--epochs") flags.epochs = value.number<int>();
                                    else if (flag == "--batch-size") flags.batch_size = value.number<int>();
                                    else if (flag == "--precision") flags.precision = value.text();
                                    else return false;
                                    return true;
                                  });
    if (!taken) return std::nullopt;
    return flags;
  }

  // train.template operator()<Precision>() for the precision policy that `precision` names,
  // and what it returns; 2 for a name that is not one; 1 with the message of a strata::Error.
  // Each policy is its own trainer type, so each name instantiates its own training.
  template <class Train>
  int with_precision(Train&& train) const {
    try {
      if (precision == "fp32") return train.template operator()<strata::FullPrecision>();
      if (precision == "bf16") return train.template operator()<strata::MixedPrecision>();
      if (precision == "fp16") return train.template operator()<strata::MixedPrecisionFp16>();
      std::cerr << "error: --precision " << precision << " is not one of fp32, bf16, fp16\n";
      return 2;
    } catch (strata::Error const& error) {
      std::cerr << "error: " << error.what() << '\n';
      return 1;
    }
  }
};

}  // namespace examples
