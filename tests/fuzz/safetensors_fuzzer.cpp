// libFuzzer target: any bytes given to the safetensors reader give a validated file or a
// strata::Error, never a crash, hang, overflow or huge allocation; a file that passes has
// tensors that tile its data exactly, and every F32 view stays inside it.
#include <cstddef>
#include <cstdint>
#include <span>

#include "strata/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  try {
    auto const file = strata::io::SafetensorsFile::parse(std::as_bytes(std::span(data, size)), "fuzz.safetensors");
    for (auto const& name : file.names()) {
      if (file.dtype(name) != "F32") continue;
      auto const values = file.f32(name, file.shape(name));
      float sum = 0.0f;
      for (float v : values) sum += v;  // ASan checks every element is inside the buffer
      (void)sum;
    }
  } catch (strata::Error const&) {
  }
  return 0;
}
