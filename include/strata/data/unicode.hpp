#pragma once
// The Unicode a text pipeline needs, on top of utf8proc (Debian's libutf8proc-dev, link
// strata::text): strict UTF-8 decoding that names the byte offset of a bad sequence, UTF-8
// encoding, character classes, canonical decomposition (NFD) and lowercasing. Tables come
// from utf8proc, never from strata.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <utf8proc.h>

#include "strata/core/error.hpp"

namespace strata::data::unicode {

// The code points of `text`. Invalid UTF-8 (a stray continuation byte, a truncated or
// overlong sequence, a surrogate, a value past U+10FFFF) is a DataError naming `what` and
// the byte offset (plus `base`, where `text` is part of a longer string); nothing is
// replaced silently.
inline void decode_utf8(std::string_view text, std::u32string& out, std::string_view what = "text", std::size_t base = 0) {
  out.clear();
  auto const* bytes = reinterpret_cast<utf8proc_uint8_t const*>(text.data());
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {  // ASCII: most text, no call
      out.push_back(char32_t(text[pos++]));
      continue;
    }
    utf8proc_int32_t c = 0;
    auto const n = utf8proc_iterate(bytes + pos, utf8proc_ssize_t(text.size() - pos), &c);
    if (n <= 0 || c < 0)
      throw DataError(strata::detail::message(what, ": invalid UTF-8 at byte offset ", base + pos, " (byte 0x", std::hex,
                                              int(static_cast<unsigned char>(text[pos])), std::dec, ")"));
    out.push_back(char32_t(c));
    pos += std::size_t(n);
  }
}

inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
    return;
  }
  utf8proc_uint8_t buffer[4];
  auto const n = utf8proc_encode_char(utf8proc_int32_t(c), buffer);
  out.append(reinterpret_cast<char const*>(buffer), std::size_t(n));
}

inline utf8proc_category_t category(char32_t c) { return utf8proc_category(utf8proc_int32_t(c)); }

// Unicode's White_Space property: the separators (Zs, Zl, Zp), tab to carriage return, NEL.
inline bool is_whitespace(char32_t c) {
  if ((c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85) return true;
  if (c < 0x80) return false;
  auto const k = category(c);
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

// General category "Other" except unassigned (Cn): control, format, private use, surrogate.
inline bool is_assigned_other(char32_t c) {
  auto const k = category(c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS;
}

// General category "Punctuation" (Pc, Pd, Ps, Pe, Pi, Pf, Po).
inline bool is_punctuation(char32_t c) {
  auto const k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

inline bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2f) || (c >= 0x3a && c <= 0x40) || (c >= 0x5b && c <= 0x60) || (c >= 0x7b && c <= 0x7e);
}

inline bool is_nonspacing_mark(char32_t c) { return c >= 0x80 && category(c) == UTF8PROC_CATEGORY_MN; }

// Canonical decomposition (NFD) of `text`, in place: every character decomposed, then each
// run of combining marks put in canonical order (a stable sort by combining class).
inline void nfd(std::u32string& text) {
  if (std::ranges::all_of(text, [](char32_t c) { return c < 0x80; })) return;  // ASCII is its own NFD
  std::u32string out;
  out.reserve(text.size() + 8);
  utf8proc_int32_t parts[32];
  for (char32_t c : text) {
    if (c < 0x80) {
      out.push_back(c);
      continue;
    }
    auto const n = utf8proc_decompose_char(utf8proc_int32_t(c), parts, 32, UTF8PROC_DECOMPOSE, nullptr);
    if (n < 0 || n > 32)
      throw DataError(strata::detail::message("unicode::nfd: cannot decompose U+", std::hex, std::uint32_t(c)));
    for (utf8proc_ssize_t i = 0; i < n; ++i) out.push_back(char32_t(parts[i]));
  }
  auto const combining = [](char32_t c) { return c < 0x80 ? 0 : int(utf8proc_get_property(utf8proc_int32_t(c))->combining_class); };
  for (std::size_t i = 0; i < out.size();) {
    if (combining(out[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < out.size() && combining(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + std::ptrdiff_t(i), out.begin() + std::ptrdiff_t(j),
                     [&](char32_t a, char32_t b) { return combining(a) < combining(b); });
    i = j;
  }
  text = std::move(out);
}

// Lowercase mapping of one character, appended to `out`: Unicode's full mapping without
// context, which differs from the simple one only for U+0130 (capital I with dot above,
// which becomes "i" + U+0307).
inline void append_lowercase(std::u32string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
  } else if (c == 0x130) {
    out.push_back(U'i');
    out.push_back(char32_t(0x307));
  } else {
    out.push_back(char32_t(utf8proc_tolower(utf8proc_int32_t(c))));
  }
}

}  // namespace strata::data::unicode
