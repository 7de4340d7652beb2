#pragma once
// Which numbers the CPU backend's matrix products multiply on this thread: float, or bf16
// inputs with float sums. A model's mixed-precision pass (nn/sequential.hpp) binds bf16
// while its layers run; the GEMM engine multiplies bf16 where the process can
// (bf16_products_available() in core/backend.hpp: oneDNN on a CPU with bf16 dot products),
// and float elsewhere. Bound per thread, like the intra-op team, so that the layers' code
// and signatures stay the same under every precision.

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

}  // namespace strata
