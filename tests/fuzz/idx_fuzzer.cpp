// libFuzzer target: any bytes given to the IDX parser give an IdxArray or a strata::Error,
// never a crash, hang, overflow or huge allocation.
#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/data/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  try {
    auto const array = strata::data::parse_idx(std::string(reinterpret_cast<char const*>(data), size), "fuzz.idx");
    std::size_t count = 1;
    for (auto d : array.dims) count *= d;
    if (count != array.values.size()) __builtin_trap();  // the promise the parser checks
  } catch (strata::Error const&) {
  }
  return 0;
}
