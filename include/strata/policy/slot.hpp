#pragma once
// The policy slots of DESIGN.md, and the concept every policy satisfies.
//
// A policy is a small tag type that names its slot (`using policy_slot = ...`) and
// carries values (`static constexpr int replicas = 4`). Nothing in it runs: behaviour
// lives in the code the trainer instantiates for it.

#include <concepts>

namespace strata::policy {

// One tag per slot. `name` is what diagnostics and docs call the slot.
struct strategy_slot { static constexpr char const* name = "strategy"; };
struct device_slot { static constexpr char const* name = "device"; };
struct precision_slot { static constexpr char const* name = "precision"; };
struct accumulation_slot { static constexpr char const* name = "accumulation"; };
// The communication slot of DESIGN.md holds two independent choices, so it is two slots:
// a bucket size and a compression type may both be given.
struct bucket_slot { static constexpr char const* name = "communication (bucket size)"; };
struct compression_slot { static constexpr char const* name = "communication (compression)"; };

// Requires: `P::policy_slot` names one of the slot tags above.
template <class P>
concept Policy = requires { typename P::policy_slot; } &&
                 (std::same_as<typename P::policy_slot, strategy_slot> ||
                  std::same_as<typename P::policy_slot, device_slot> ||
                  std::same_as<typename P::policy_slot, precision_slot> ||
                  std::same_as<typename P::policy_slot, accumulation_slot> ||
                  std::same_as<typename P::policy_slot, bucket_slot> ||
                  std::same_as<typename P::policy_slot, compression_slot>);

// For static_asserts in branches that must only fire when instantiated.
template <class...>
inline constexpr bool dependent_false = false;

}  // namespace strata::policy
