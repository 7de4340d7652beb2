#pragma once
// Communication policies: gradient bucket size and wire compression.

#include <cstddef>
#include <string>
#include <type_traits>

#include "strata/core/dtype.hpp"
#include "strata/policy/slot.hpp"

namespace strata::policy {

// Gradients are all-reduced in buckets of B bytes (PyTorch DDP's default is 25 MiB).
template <std::size_t B>
struct BucketBytes {
  static_assert(B >= 1, "strata::BucketBytes<B>: B must be at least 1 byte");
  using policy_slot = bucket_slot;
  static constexpr std::size_t bytes = B;
  static std::string name() { return "BucketBytes<" + std::to_string(B) + ">"; }
};

inline constexpr std::size_t default_bucket_bytes = std::size_t{25} << 20;

// No compression: gradients travel as fp32.
struct NoCompression {
  using policy_slot = compression_slot;
  using wire_type = float;
  static std::string name() { return "NoCompression"; }
};

// Gradients travel as T (bf16 or fp16): each replica's gradient is rounded to T, the
// all-reduce moves T (half the bytes of fp32) and the sum, rounded to T, is widened back.
// strata's own engines accumulate in fp32 and round once; MPI rounds at every hop (docs/communication.md).
template <class T>
struct Compress {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, fp16>,
                "strata::Compress<T>: T must be strata::bf16 or strata::fp16 (uncompressed fp32 is NoCompression)");
  using policy_slot = compression_slot;
  using wire_type = T;
  static std::string name() { return std::string("Compress<") + dtype_name<T> + ">"; }
};

}  // namespace strata::policy
