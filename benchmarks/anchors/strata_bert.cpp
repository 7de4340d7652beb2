// strata's side of the BERT throughput comparison (benchmarks/anchors/bert.py): the case
// study's model (all-MiniLM-L6-v2 with pooler, dropout and a 2-class head), the same
// sentences, split, maximum length 64 and batch 32 as benchmarks/anchors/torch_bert.py.
//   training   `steps` optimizer steps of Trainer<Mirrored<2>> (AdamW, warm-up schedule);
//              sequences/s = batch / the median step time (two warm-up steps left out)
//   inference  the 800 dev sentences in batches of 64 through Trainer::evaluate
// Prints one JSON line with the fields torch_bert.py prints.
//
//   strata_bert [--steps 20] [--precision fp32|bf16]

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <strata.hpp>
#include <strata/io/huggingface.hpp>
#include <strata/text.hpp>

namespace {

constexpr int max_length = 64, batch_size = 32;
using Model = strata::Sequential<strata::Bert<6, 384, 12, 1536, 30522, max_length>, strata::BertPooler<384, max_length>,
                                 strata::Dropout, strata::Dense<384, 2>>;
using Clock = std::chrono::steady_clock;

strata::data::Dataset encode(strata::data::BertTokenizer const& tokenizer, strata::data::TextDataset const& text) {
  return tokenizer.encode(text.texts, max_length).to_dataset(text.labels);
}

struct StepTimes {
  std::vector<double>* seconds;
  Clock::time_point last = Clock::now();
  void on_epoch_begin(int) { last = Clock::now(); }
  void on_batch_end(strata::BatchLogs const&) {
    auto const now = Clock::now();
    seconds->push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  }
};

template <class Precision>
void run(int steps) {
  auto const directory = strata::data::minilm_directory();
  auto const sentences = strata::data::sentence_polarity();
  auto const split = strata::data::stratified_split(sentences.labels, 0.2, 2026);
  auto const tokenizer = strata::data::BertTokenizer::from_directory(directory);
  auto const train = encode(tokenizer, sentences.subset(split.train)).take(std::size_t(steps + 2) * batch_size);
  auto const dev = encode(tokenizer, sentences.subset(split.dev));
  Model model(2026, {}, {}, strata::Dropout{0.1f}, {});
  strata::io::load_huggingface_bert(model, directory);
  strata::Trainer<strata::Mirrored<2>, Precision> trainer;
  auto optimizer = strata::scheduled(
      strata::AdamW{.lr = 5e-5f, .weight_decay = 0.01f, .epsilon = 1e-6f, .exclude_from_weight_decay = {"bias", "layer_norm"}},
      strata::WarmupLinearDecay{.warmup_steps = 2, .total_steps = steps + 3});
  std::vector<double> seconds;
  trainer.fit(model, optimizer, strata::SoftmaxCrossEntropy{}, train,
              {.epochs = 1, .batch_size = batch_size, .shuffle = false, .seed = 7}, StepTimes{&seconds});
  std::vector<double> timed(seconds.begin() + 2, seconds.end());
  std::sort(timed.begin(), timed.end());
  double const train_rate = batch_size / timed[timed.size() / 2];

  trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, dev.take(128), 64);  // warm-up
  auto const start = Clock::now();
  trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, dev, 64);
  double const infer_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::cout << "{\"system\": \"strata\", \"dtype\": \"" << Precision::name() << "\", \"gemm\": \""
            << strata::cpu_gemm_engine() << "\", \"train_sequences_per_s\": " << train_rate
            << ", \"inference_sequences_per_s\": " << double(dev.size()) / infer_seconds
            << ", \"peak_rss_mb\": " << double(usage.ru_maxrss) / 1024.0 << "}" << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  std::string precision = "fp32";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const flag = argv[i];
    if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    else if (flag == "--precision") precision = argv[i + 1];
  }
  try {
    if (precision == "bf16") run<strata::MixedPrecision>(steps);
    else run<strata::FullPrecision>(steps);
    return 0;
  } catch (strata::Error const& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
}
