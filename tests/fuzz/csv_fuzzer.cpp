// libFuzzer target: any bytes given to the CSV parser (with options taken from the first
// byte) give a Dataset or a strata::Error, never a crash or a ragged table.
#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/data/csv.hpp"

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size == 0) return 0;
  strata::data::CsvOptions options;
  options.header = (data[0] & 1) != 0;
  options.label_column = int(data[0] >> 1) % 7 - 3;  // -3..3
  options.delimiter = (data[0] & 0x80) ? ';' : ',';
  try {
    auto const dataset = strata::data::parse_csv(std::string(reinterpret_cast<char const*>(data) + 1, size - 1),
                                                 "fuzz.csv", options);
    if (dataset.features().cols != int(dataset.size()) || dataset.targets().rows != 1) __builtin_trap();
  } catch (strata::Error const&) {
  }
  return 0;
}
