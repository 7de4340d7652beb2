// The policy pack parser: any order, defaults, values. (Rejections are in compile_fail/.)
#include <doctest/doctest.h>

#include <type_traits>

#include "strata.hpp"

using namespace strata;

// Every order of the same policies names one type, for the trainer and the strategy alike.
static_assert(std::is_same_v<Trainer<Mirrored<4>, MixedPrecision, GradAccum<8>>,
                             Trainer<GradAccum<8>, Mirrored<4>, MixedPrecision>>);
static_assert(std::is_same_v<Trainer<Mirrored<4>, MixedPrecision, GradAccum<8>>,
                             Trainer<MixedPrecision, GradAccum<8>, Mirrored<4>>>);
static_assert(std::is_same_v<Trainer<Mirrored<4>, MixedPrecision, GradAccum<8>>,
                             Trainer<GradAccum<8>, MixedPrecision, Mirrored<4>>>);
static_assert(std::is_same_v<Strategy<Cpu, Mirrored<2>>, Strategy<Mirrored<2>, Cpu>>);
// Spelling a default out is the same as leaving it out.
static_assert(std::is_same_v<Trainer<>, Trainer<OneDevice, Cpu, FullPrecision, GradAccum<1>>>);
static_assert(std::is_same_v<Trainer<Mirrored<2>>, Trainer<GradAccum<1>, Mirrored<2>, BucketBytes<25u << 20>>>);
// Different choices are different types.
static_assert(!std::is_same_v<Trainer<Mirrored<2>>, Trainer<Mirrored<3>>>);

TEST_CASE("missing slots take their defaults") {
  using C = policy::Config<>;
  CHECK(std::is_same_v<C::strategy, OneDevice>);
  CHECK(std::is_same_v<C::device, Cpu>);
  CHECK(std::is_same_v<C::precision, FullPrecision>);
  CHECK(std::is_same_v<C::accumulation, GradAccum<1>>);
  CHECK(C::bucket::bytes == 25u * 1024u * 1024u);
  CHECK(std::is_same_v<C::compression::wire_type, float>);
  CHECK(C::num_replicas == 1);
}

TEST_CASE("policies carry their values into the resolved configuration") {
  using C = policy::Config<GradAccum<8>, BucketBytes<1024>, Mirrored<4>, Compress<bf16>, MixedPrecisionFp16>;
  CHECK(C::num_replicas == 4);
  CHECK(C::accumulation_steps == 8);
  CHECK(C::bucket::bytes == 1024);
  CHECK(std::is_same_v<C::compression::wire_type, bf16>);
  CHECK(std::is_same_v<C::precision::compute_type, fp16>);
  CHECK(std::is_same_v<C::precision::loss_scale, policy::DynamicLossScale>);
  CHECK(std::is_same_v<MixedPrecision::compute_type, bf16>);
  CHECK(std::is_same_v<MixedPrecision::master_type, float>);
  CHECK(MultiWorkerMirrored<2>::local_replicas == 2);
  CHECK(ParameterServer<3, 2>::workers == 3);
  CHECK(ParameterServer<3, 2>::servers == 2);
  CHECK(StaticLossScale<128>::initial_scale == 128.0f);
  CHECK(policy::DynamicLossScale::initial_scale == 32768.0f);
  CHECK(policy::DynamicLossScale::growth_interval == 2000);
  CHECK(Precision<fp16, BasicDynamicLossScale<1024, 10>>::name() == "Precision<fp16, DynamicLossScale<1024, 10>>");
}

TEST_CASE("the exact spelling of the design compiles and reports its replicas") {
  Trainer<Mirrored<4>, MixedPrecision, GradAccum<8>> trainer;
  CHECK(trainer.num_replicas_in_sync() == 4);
  CHECK(decltype(trainer)::config::accumulation_steps == 8);
}

TEST_CASE("every policy satisfies the Policy concept, other types do not") {
  CHECK(policy::Policy<OneDevice>);
  CHECK(policy::Policy<Mirrored<3>>);
  CHECK(policy::Policy<CentralStorage<2>>);
  CHECK(policy::Policy<Cuda>);
  CHECK(policy::Policy<Precision<fp16, StaticLossScale<8>>>);
  CHECK(policy::Policy<BucketBytes<1>>);
  CHECK_FALSE(policy::Policy<int>);
  CHECK_FALSE(policy::Policy<Sgd>);
}
