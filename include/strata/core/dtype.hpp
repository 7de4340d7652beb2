#pragma once
// 16-bit floating-point storage types. They store 16 bits and convert to and from float;
// arithmetic happens in float registers (docs/precision.md says what that gains on a CPU).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace strata {

// bfloat16: float's exponent, 7 mantissa bits. Conversion rounds to nearest even; NaN stays NaN.
struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  explicit bf16(float value) : bits(from_float(value)) {}
  explicit operator float() const { return std::bit_cast<float>(std::uint32_t{bits} << 16); }

  // Branch-free, so the loops in round_to/store below vectorize.
  static std::uint16_t from_float(float value) {
    std::uint32_t const u = std::bit_cast<std::uint32_t>(value);
    std::uint32_t const rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    std::uint32_t const nan = (u >> 16) | 0x40u;  // quiet NaN
    return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
};

// IEEE binary16: 5 exponent bits, 10 mantissa bits, max 65504. Rounds to nearest even.
struct fp16 {
  std::uint16_t bits = 0;

  fp16() = default;
  explicit fp16(float value) : bits(from_float(value)) {}
  explicit operator float() const { return to_float(bits); }

  static std::uint16_t from_float(float value) {
    std::uint32_t const u = std::bit_cast<std::uint32_t>(value);
    std::uint32_t const sign = (u >> 16) & 0x8000u;
    std::uint32_t const magnitude = u & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);      // NaN
    if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);     // overflow to inf
    if (magnitude < 0x38800000u) {                                                       // subnormal or zero
      float const scaled = std::bit_cast<float>(magnitude) * 16777216.0f;               // * 2^24
      auto const m = static_cast<std::uint32_t>(__builtin_nearbyintf(scaled));
      return static_cast<std::uint16_t>(sign | m);
    }
    std::uint32_t r = magnitude - 0x38000000u;  // rebias exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }

  static float to_float(std::uint16_t h) {
    std::uint32_t const sign = std::uint32_t{h & 0x8000u} << 16;
    std::uint32_t const exponent = (h >> 10) & 0x1fu;
    std::uint32_t const mantissa = h & 0x3ffu;
    if (exponent == 0) {
      float const value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // * 2^-24
      return sign ? -value : value;
    }
    if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "16-bit types must really be 16 bits");

template <class T>
inline constexpr bool is_compute_type = std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

// x[i] = float(T(x[i])): values a T can hold, kept in float registers. A no-op for float.
template <class T>
void round_to(float* x, std::size_t n) {
  if constexpr (std::is_same_v<T, bf16>) {
    for (std::size_t i = 0; i < n; ++i) x[i] = std::bit_cast<float>(std::uint32_t{bf16::from_float(x[i])} << 16);
  } else if constexpr (std::is_same_v<T, fp16>) {
    std::size_t i = 0;
#if defined(__F16C__)  // the CPU converts 8 at a time (vcvtps2ph / vcvtph2ps), with the same IEEE rounding
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
#endif
    for (; i < n; ++i) x[i] = fp16::to_float(fp16::from_float(x[i]));
  }
}

// out[i] = T(in[i]) and back: the 16-bit storage of activations.
template <class T>
void store(T* out, float const* in, std::size_t n) {
  std::size_t i = 0;
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, fp16>)
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) out[i].bits = T::from_float(in[i]);
}
template <class T>
void load(float* out, T const* in, std::size_t n) {
  if constexpr (std::is_same_v<T, bf16>) {
    for (std::size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(std::uint32_t{in[i].bits} << 16);
  } else {
    std::size_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<__m128i const*>(in + i))));
#endif
    for (; i < n; ++i) out[i] = fp16::to_float(in[i].bits);
  }
}

// The names policies and messages print.
template <class T>
inline constexpr char const* dtype_name = "unknown";
template <>
inline constexpr char const* dtype_name<float> = "float";
template <>
inline constexpr char const* dtype_name<bf16> = "bf16";
template <>
inline constexpr char const* dtype_name<fp16> = "fp16";

}  // namespace strata
