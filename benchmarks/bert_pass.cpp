// One replica's forward and backward through the BERT case study's model
// (all-MiniLM-L6-v2's shape, MaxLen 64, weights drawn at random: the time does not depend on
// their values) on 16 sentences of 8 to 37 real tokens, as a replica of Trainer<Mirrored<2>>
// at batch 32 gets them, on one thread:
//   BertPass/<precision>/<chunks>   fp32, or bf16 (MixedPrecision's pass) with chunks of as
//                                   many sentences as their real tokens fit (packed) or of 4
//                                   padded sentences (padded: what the pass did before Bert
//                                   said how many columns it packs)
// Counters: the chunks a pass takes, and the products' weights (bf16 products read the
// rounded copy the trainer keeps; here the products round them as they go, the same for both
// bf16 rows).
// Run: build/benchmarks/bert_pass --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//        --benchmark_enable_random_interleaving=true

#include <benchmark/benchmark.h>

#include <strata.hpp>

namespace {

using Encoder = strata::Bert<6, 384, 12, 1536, 30522, 64>;
// The encoder without its count of packed columns (nn::PacksColumns): chunks of padded sentences.
struct PaddedChunks : Encoder {
  std::size_t packed_columns(strata::ConstMatrixView) const = delete;
};
template <class E>
using Model = strata::Sequential<E, strata::BertPooler<384, 64>, strata::Dropout, strata::Dense<384, 2>>;

template <class E, class T>
void bert_pass(benchmark::State& state) {
  constexpr int samples = 16;
  Model<E> model(1);
  typename Model<E>::template Workspace<strata::CpuBackend, T> ws(samples);
  strata::Rng rng(3);
  strata::Matrix ids = strata::Matrix::Zero(64, samples), classes(1, samples);
  for (int s = 0; s < samples; ++s) {
    int const length = 8 + int(rng() % 30);
    for (int t = 0; t < length; ++t) ids(t, s) = float(t == 0 ? 101 : 1000 + int(rng() % 20000));
    classes(0, s) = float(s % 2);
  }
  strata::nn::ForwardContext const training{.training = true, .seed = 1};
  for (auto _ : state) {
    model.forward(ws, model.parameters().data(), strata::view(ids), training);
    strata::SoftmaxCrossEntropy{}.forward_backward<strata::CpuBackend>(ws.output(), strata::view(classes),
                                                                       ws.output_gradient(), 1.0f);
    model.backward(ws, model.parameters().data(), model.gradients().data(), strata::view(ids), false);
    benchmark::DoNotOptimize(model.gradients().data());
  }
  if constexpr (!std::is_same_v<T, float>) state.counters["chunks"] = double(ws.chunks().size());
  state.SetItemsProcessed(state.iterations() * samples);
}

BENCHMARK_TEMPLATE(bert_pass, Encoder, float)->Name("BertPass/fp32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(bert_pass, Encoder, strata::bf16)->Name("BertPass/bf16/packed")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(bert_pass, PaddedChunks, strata::bf16)
    ->Name("BertPass/bf16/padded")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
