#pragma once
// The policy pack parser: `Config<Ps...>` takes policies in any order, fills each missing
// slot with its default, and rejects a type that is no policy or a second policy for a
// slot. Policies are resolved here, in host C++, so nothing downstream sees Hana.
//
// `Config<Ps...>` is an alias for one canonical `Resolved<...>` type, so
// `Config<GradAccum<8>, Mirrored<4>>` and `Config<Mirrored<4>, GradAccum<8>>` are the same
// type, and so are the trainers and strategies built on them.

#include <string>
#include <type_traits>

#include <boost/hana/append.hpp>
#include <boost/hana/filter.hpp>
#include <boost/hana/front.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/unpack.hpp>

#include "strata/policy/accumulation.hpp"
#include "strata/policy/communication.hpp"
#include "strata/policy/device.hpp"
#include "strata/policy/precision.hpp"
#include "strata/policy/slot.hpp"
#include "strata/policy/strategy.hpp"

namespace strata::policy {

// The canonical, fully resolved configuration: one policy per slot.
template <class Strategy, class Device, class Prec, class Accumulation, class Bucket, class Compression>
struct Resolved {
  using strategy = Strategy;
  using device = Device;
  using precision = Prec;
  using accumulation = Accumulation;
  using bucket = Bucket;
  using compression = Compression;

  static constexpr int num_replicas = Strategy::replicas;
  static constexpr int accumulation_steps = Accumulation::steps;

  // "Mirrored<4>, Cpu, FullPrecision, GradAccum<8>, BucketBytes<26214400>, NoCompression"
  static std::string describe() {
    return Strategy::name() + ", " + Device::name() + ", " + Prec::name() + ", " + Accumulation::name() + ", " +
           Bucket::name() + ", " + Compression::name();
  }
};

namespace detail {

namespace hana = boost::hana;

// The first line of the error names the offending type through the instantiation context.
template <class T>
struct check_is_policy {
  static_assert(Policy<T>,
                "strata: this Trainer/Strategy argument is not a strata policy; pass policies such as "
                "OneDevice, Mirrored<N>, Cpu, Cuda, FullPrecision, MixedPrecision, GradAccum<K>, BucketBytes<B>");
  static constexpr bool value = true;
};

template <class T>
struct slot_of {
  using type = void;
};
template <Policy T>
struct slot_of<T> {
  using type = typename T::policy_slot;
};

template <class Slot, class... Matches>
struct check_single_policy {
  static_assert(sizeof...(Matches) <= 1,
                "strata: two policies fill the same slot (Slot, then the policies, are listed in this "
                "instantiation); keep only one of them");
  static constexpr bool value = true;
};

// The policy of `Ps...` in `Slot`, or `Default` when none is given.
template <class Slot, class Default, class... Ps>
struct pick {
  static constexpr auto matches = hana::filter(hana::tuple_t<Ps...>, [](auto t) {
    return hana::bool_c<std::is_same_v<typename slot_of<typename decltype(t)::type>::type, Slot>>;
  });
  static constexpr bool single = decltype(hana::unpack(matches, [](auto... t) {
    return hana::type_c<check_single_policy<Slot, typename decltype(t)::type...>>;
  }))::type::value;
  using type =
      typename std::remove_cvref_t<decltype(hana::front(hana::append(matches, hana::type_c<Default>)))>::type;
};

template <class... Ps>
struct resolve {
  static constexpr bool all_policies = (check_is_policy<Ps>::value && ... && true);
  using type = Resolved<typename pick<strategy_slot, OneDevice, Ps...>::type,
                        typename pick<device_slot, Cpu, Ps...>::type,
                        typename pick<precision_slot, FullPrecision, Ps...>::type,
                        typename pick<accumulation_slot, GradAccum<1>, Ps...>::type,
                        typename pick<bucket_slot, BucketBytes<default_bucket_bytes>, Ps...>::type,
                        typename pick<compression_slot, NoCompression, Ps...>::type>;
  // Touching the checks here makes them fire even when a slot's type is never used.
  static_assert(all_policies && pick<strategy_slot, OneDevice, Ps...>::single &&
                pick<device_slot, Cpu, Ps...>::single && pick<precision_slot, FullPrecision, Ps...>::single &&
                pick<accumulation_slot, GradAccum<1>, Ps...>::single &&
                pick<bucket_slot, BucketBytes<default_bucket_bytes>, Ps...>::single &&
                pick<compression_slot, NoCompression, Ps...>::single);
};

}  // namespace detail

template <class... Ps>
using Config = typename detail::resolve<Ps...>::type;

}  // namespace strata::policy
