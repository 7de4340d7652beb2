#pragma once
// CRC-32C (Castagnoli), and the masked form TFRecord framing stores (TensorFlow's
// crc32c::Mask): a CRC of data that itself holds CRCs is masked so that it stays checkable.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace strata::profile {

namespace detail {
inline constexpr std::array<std::uint32_t, 256> crc32c_table = [] {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // the reflected polynomial
    table[i] = c;
  }
  return table;
}();
}  // namespace detail

inline std::uint32_t crc32c(std::span<std::byte const> data) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::byte b : data) c = detail::crc32c_table[(c ^ std::uint32_t(b)) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

inline std::uint32_t masked_crc32c(std::span<std::byte const> data) {
  std::uint32_t const c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

}  // namespace strata::profile
