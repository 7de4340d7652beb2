#pragma once
// A fixed-size, zero-initialised, 64-byte aligned float buffer: one cache line per start,
// so arena slices vectorise and replicas' slices do not share lines.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <span>

namespace strata {

inline constexpr std::size_t cache_line_floats = 16;

constexpr std::size_t round_up_to_line(std::size_t n) {
  return (n + cache_line_floats - 1) / cache_line_floats * cache_line_floats;
}

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t size)
      : data_(size ? new (std::align_val_t{64}) float[size]() : nullptr), size_(size) {}
  AlignedBuffer(AlignedBuffer const& other) : AlignedBuffer(other.size_) {
    std::copy_n(other.data(), size_, data());
  }
  AlignedBuffer& operator=(AlignedBuffer const& other) {
    if (this != &other) *this = AlignedBuffer(other);
    return *this;
  }
  AlignedBuffer(AlignedBuffer&&) noexcept = default;
  AlignedBuffer& operator=(AlignedBuffer&&) noexcept = default;

  [[nodiscard]] float* data() { return data_.get(); }
  [[nodiscard]] float const* data() const { return data_.get(); }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::span<float> span() { return {data(), size_}; }
  [[nodiscard]] std::span<float const> span() const { return {data(), size_}; }

 private:
  struct Delete {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<float[], Delete> data_;
  std::size_t size_ = 0;
};

// One value on a cache line of its own: per-replica counters and flags that replica threads
// write side by side, without false sharing.
template <class T>
struct alignas(64) OnCacheLine {
  T value{};
};

}  // namespace strata
