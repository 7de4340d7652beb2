#pragma once
// Which numbers the CPU backend's matrix products multiply on this thread: float, or bf16
// inputs with float sums. A model's mixed-precision pass (nn/sequential.hpp) binds bf16
// while its layers run; the GEMM engine multiplies bf16 where the process can
// (bf16_products_available() in core/backend.hpp: oneDNN on a CPU with bf16 dot products),
// and float elsewhere. Bound per thread, like the intra-op team, so that the layers' code
// and signatures stay the same under every precision.
//
// A bf16 product rounds its inputs to bf16 first. Inputs that many products read between
// two writes (the weights of a training step: every replica's forward and backward) are
// rounded once instead, by whoever writes them (train/replica_pass.hpp), and bound here as
// a Bf16Copy: a product whose input lies inside the copied floats reads the copy.

#include <cstddef>
#include <functional>
#include <span>

#include "strata/core/dtype.hpp"

namespace strata {

inline thread_local bool bf16_products_bound = false;

// Binds bf16 products (`on`) or float products on this thread for its lifetime, then
// restores the previous binding.
class Bf16ProductsBinding {
 public:
  explicit Bf16ProductsBinding(bool on) : previous_(bf16_products_bound) { bf16_products_bound = on; }
  ~Bf16ProductsBinding() { bf16_products_bound = previous_; }
  Bf16ProductsBinding(Bf16ProductsBinding const&) = delete;
  Bf16ProductsBinding& operator=(Bf16ProductsBinding const&) = delete;

 private:
  bool previous_;
};

// A weight matrix (rows x cols, column-major, at `floats`) rounded like a Bf16Copy and laid
// out as strata's bf16 kernel reads a product's first factor (bf16_gemm::pack_a,
// core/bf16_gemm.hpp): a product that multiplies by it reads it without packing it.
struct PackedBf16Matrix {
  float const* floats = nullptr;
  int rows = 0, cols = 0;
  bf16 const* packed = nullptr;
};

// copy[i] is floats[i] rounded to bf16 the way the GEMM engine rounds a product's inputs
// (round_to_product_bf16 in core/backend.hpp), for i < size; `packed`, where the engine is
// strata's bf16 kernel, the weight matrices among them in its layout. Empty: no copy.
struct Bf16Copy {
  float const* floats = nullptr;
  bf16 const* copy = nullptr;
  std::size_t size = 0;
  std::span<PackedBf16Matrix const> packed{};

  // The packed copy of the rows x cols matrix at `data`, or nullptr.
  [[nodiscard]] bf16 const* find_packed(float const* data, int rows, int cols) const {
    for (PackedBf16Matrix const& m : packed)
      if (m.floats == data && m.rows == rows && m.cols == cols) return m.packed;
    return nullptr;
  }

  // The copy of floats [data, data + n), or nullptr where they are not all inside it.
  [[nodiscard]] bf16 const* find(float const* data, std::size_t n) const {
    std::less<float const*> const before;  // a total order, even between unrelated arrays
    if (size == 0 || before(data, floats) || before(floats + size, data) || std::size_t(floats + size - data) < n)
      return nullptr;
    return copy + (data - floats);
  }
};

inline thread_local Bf16Copy bf16_copy_bound{};

// Binds `copy` on this thread for its lifetime, then restores the previous one.
class Bf16CopyBinding {
 public:
  explicit Bf16CopyBinding(Bf16Copy copy) : previous_(bf16_copy_bound) { bf16_copy_bound = copy; }
  ~Bf16CopyBinding() { bf16_copy_bound = previous_; }
  Bf16CopyBinding(Bf16CopyBinding const&) = delete;
  Bf16CopyBinding& operator=(Bf16CopyBinding const&) = delete;

 private:
  Bf16Copy previous_;
};

}  // namespace strata
