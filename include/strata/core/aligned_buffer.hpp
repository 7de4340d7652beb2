#pragma once
// Fixed-size, zero-initialised, 64-byte aligned arrays: one cache line per start, so arena
// slices vectorise and replicas' slices do not share lines. AlignedBuffer holds floats
// (weights, gradients, optimizer state); AlignedArray<bf16> the weights' bf16 copy.
//
// An array of 2 MiB or more starts on a 2 MiB boundary and asks Linux for transparent huge
// pages (madvise: the kernel's default mode on Debian gives them only where asked). A
// training step streams through several such arrays, each millions of floats; with 4 KiB
// pages every 4 KiB crossed is a TLB miss, with huge pages every 2 MiB. The cost is at most
// one partly used huge page per array.
//
// On Linux such an array is a mapping of its own (mmap), whose pages the kernel hands out
// zeroed on first write: nothing is written at construction, and a page never written costs
// no memory. (The float copy of the weights that only name a bf16 copy, train/replica_pass.hpp,
// is never written.) Under AddressSanitizer they come from operator new, so that it watches them.
//
// An array written only here and there (that float copy, whose biases and embeddings sit
// between kernels it never writes) asks for ordinary 4 KiB pages instead (Pages::small): one
// write then brings in 4 KiB, not 2 MiB, so only what is written costs memory.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <type_traits>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define STRATA_DETAIL_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_DETAIL_ADDRESS_SANITIZER 1
#endif
#endif

namespace strata {

inline constexpr std::size_t cache_line_floats = 16;

constexpr std::size_t round_up_to_line(std::size_t n) {
  return (n + cache_line_floats - 1) / cache_line_floats * cache_line_floats;
}

// The pages a large array asks for: huge (the default: arrays streamed whole) or small (an
// array only partly written, above).
enum class Pages { huge, small };

namespace detail {

inline constexpr std::size_t huge_page_bytes = std::size_t(2) << 20;

// Where an array of `bytes` starts, and how many bytes it reserves.
struct Placement {
  std::size_t alignment, reserved;
};
constexpr Placement placement_of(std::size_t bytes) {
  if (bytes < huge_page_bytes) return {64, bytes};
  return {huge_page_bytes, (bytes + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes};
}

// Whether an array of `bytes` is a mapping of its own (above), given back with munmap.
constexpr bool mapped(std::size_t bytes) {
#if defined(__linux__) && !defined(STRATA_DETAIL_ADDRESS_SANITIZER)
  return placement_of(bytes).alignment == huge_page_bytes;
#else
  (void)bytes;
  return false;
#endif
}

// `bytes` of zeros at placement_of(bytes), in huge pages where the array is large enough
// and `pages` asks for them.
inline void* allocate_zeroed(std::size_t bytes, Pages pages = Pages::huge) {
  Placement const p = placement_of(bytes);
#if defined(__linux__)
  if (mapped(bytes)) {
    // Map 2 MiB more than needed, then give back what lies before the first 2 MiB boundary
    // and after the array.
    std::size_t const span = p.reserved + huge_page_bytes;
    void* const memory = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    auto const base = reinterpret_cast<std::uintptr_t>(memory);
    std::uintptr_t const start = (base + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
    if (start > base) ::munmap(memory, start - base);
    if (std::size_t const tail = base + span - (start + p.reserved); tail > 0)
      ::munmap(reinterpret_cast<void*>(start + p.reserved), tail);
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    // A refusal (huge pages disabled) leaves ordinary pages: the same array, only slower.
    // Small pages are asked for too, in case the kernel gives huge ones unasked (mode "always").
    (void)::madvise(reinterpret_cast<void*>(start), p.reserved, pages == Pages::huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    return reinterpret_cast<void*>(start);
  }
#endif
  void* const memory = ::operator new(p.reserved, std::align_val_t{p.alignment});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Before the first touch, so the zeroing below faults huge pages in.
  if (p.alignment == huge_page_bytes && pages == Pages::huge) (void)::madvise(memory, p.reserved, MADV_HUGEPAGE);
#endif
  std::memset(memory, 0, bytes);
  return memory;
}

inline void free_zeroed(void* memory, std::size_t bytes) {
  Placement const p = placement_of(bytes);
#if defined(__linux__)
  if (mapped(bytes)) {
    ::munmap(memory, p.reserved);
    return;
  }
#endif
  ::operator delete(memory, std::align_val_t{p.alignment});
}

}  // namespace detail

template <class T>
class AlignedArray {
  static_assert(std::is_trivially_copyable_v<T>, "AlignedArray holds plain numbers, zeroed bytewise");

 public:
  AlignedArray() = default;
  explicit AlignedArray(std::size_t size, Pages pages = Pages::huge)
      : data_(size ? static_cast<T*>(detail::allocate_zeroed(size * sizeof(T), pages)) : nullptr, Free{size * sizeof(T)}),
        size_(size) {}
  AlignedArray(AlignedArray const& other) : AlignedArray(other.size_) { std::copy_n(other.data(), size_, data()); }
  AlignedArray& operator=(AlignedArray const& other) {
    if (this != &other) *this = AlignedArray(other);
    return *this;
  }
  AlignedArray(AlignedArray&&) noexcept = default;
  AlignedArray& operator=(AlignedArray&&) noexcept = default;

  [[nodiscard]] T* data() { return data_.get(); }
  [[nodiscard]] T const* data() const { return data_.get(); }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] bool empty() const { return size_ == 0; }
  [[nodiscard]] std::span<T> span() { return {data(), size_}; }
  [[nodiscard]] std::span<T const> span() const { return {data(), size_}; }

 private:
  struct Free {
    std::size_t bytes;  // what was asked for: it gives the placement back
    void operator()(T* p) const { detail::free_zeroed(static_cast<void*>(p), bytes); }
  };
  std::unique_ptr<T, Free> data_{nullptr, Free{0}};
  std::size_t size_ = 0;
};

using AlignedBuffer = AlignedArray<float>;

// One value on a cache line of its own: per-replica counters and flags that replica threads
// write side by side, without false sharing.
template <class T>
struct alignas(64) OnCacheLine {
  T value{};
};

}  // namespace strata
