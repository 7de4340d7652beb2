// The BERT case study: fine-tune all-MiniLM-L6-v2 (pretrained weights from its safetensors
// file) on Pang & Lee's 4,000 sentences of movie-review polarity, with two synchronous
// replicas. The data is split 80/20 (seeded, stratified), tokenized by strata's WordPiece on
// every core, and the model is a type:
//
//   Sequential<Bert<6, 384, 12, 1536, 30522, 64>, BertPooler<384, 64>, Dropout, Dense<384, 2>>
//
// trained by Trainer<Mirrored<2>, Precision> with AdamW (no weight decay on biases and LayerNorm),
// linear warm-up over the first 10% of steps and linear decay to 0. Each epoch prints the
// dev accuracy and the sequences per second; the last line is `dev_accuracy=0.xxxx`.
//
//   bert_finetune [--epochs N] [--batch-size B] [--lr R] [--precision auto|fp32|bf16]
//
// scripts/fetch-bert-data (run by scripts/setup) brings the weights and the sentences.
// Precision `auto` (the default) picks MixedPrecision where the CPU multiplies bf16
// (AVX512_BF16 with oneDNN linked): its GEMMs then run at twice the rate, for the same dev
// accuracy. Elsewhere MixedPrecision would still compute in float and only add conversions,
// so `auto` is FullPrecision there (docs/bert.md has the figures). A batch of 32 sequences
// of 64 tokens fits in memory, so there is nothing to accumulate.

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>

#include <strata.hpp>
#include <strata/io/huggingface.hpp>
#include <strata/text.hpp>

#include "command_line.hpp"

namespace {

constexpr int max_length = 64;
using Model = strata::Sequential<strata::Bert<6, 384, 12, 1536, 30522, max_length>, strata::BertPooler<384, max_length>,
                                 strata::Dropout, strata::Dense<384, 2>>;

strata::data::Dataset encode(strata::data::BertTokenizer const& tokenizer, strata::data::TextDataset const& text) {
  return tokenizer.encode(text.texts, max_length).to_dataset(text.labels);
}

// One line per epoch under the progress bar.
struct EpochReport {
  std::size_t train_sequences;
  void on_epoch_end(strata::EpochLogs const& logs) const {
    std::printf("epoch %d: dev_accuracy=%.4f, %.1f sequences/s (training), loss %.4f\n", logs.epoch + 1,
                logs.val_accuracy.value_or(0.0), double(train_sequences) / logs.seconds, logs.loss);
    std::fflush(stdout);
  }
};

template <class Precision>
int fine_tune(int epochs, int batch_size, float lr) {
  auto const directory = strata::data::minilm_directory();
  auto const sentences = strata::data::sentence_polarity();
  auto const split = strata::data::stratified_split(sentences.labels, 0.2, /*seed=*/2026);
  auto const tokenizer = strata::data::BertTokenizer::from_directory(directory);
  auto const tokenize_start = std::chrono::steady_clock::now();
  auto const train = encode(tokenizer, sentences.subset(split.train));
  auto const dev = encode(tokenizer, sentences.subset(split.dev));
  double const tokenize_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - tokenize_start).count();

  Model model(/*seed=*/2026, {}, {}, strata::Dropout{0.1f}, {});
  auto const report = strata::io::load_huggingface_bert(model, directory);

  std::size_t dev_index_sum = 0;  // the split's fingerprint: benchmarks/anchors/torch_bert.py recomputes it
  for (auto i : split.dev) dev_index_sum += i;

  strata::Trainer<strata::Mirrored<2>, Precision> trainer;
  std::cout << "BERT fine-tuning: " << train.size() << " training and " << dev.size()
            << " dev sentences of sentence polarity (dev index sum " << dev_index_sum << "), tokenized in " << tokenize_seconds
            << " s on " << std::thread::hardware_concurrency() << " threads; " << report.loaded.size()
            << " pretrained tensors from " << directory.string() << "; " << Model::parameter_count << " parameters on "
            << trainer.num_replicas_in_sync() << " replicas, " << Precision::name() << "; GEMM: " << strata::cpu_gemm_engine()
            << "\n";

  std::int64_t const steps_per_epoch = (std::int64_t(train.size()) + batch_size - 1) / batch_size;
  std::int64_t const total_steps = steps_per_epoch * epochs;
  auto optimizer = strata::scheduled(
      strata::AdamW{.lr = lr, .weight_decay = 0.01f, .epsilon = 1e-6f, .exclude_from_weight_decay = {"bias", "layer_norm"}},
      strata::WarmupLinearDecay{.warmup_steps = total_steps / 10, .total_steps = total_steps});
  trainer.fit(model, optimizer, strata::SoftmaxCrossEntropy{}, train,
              {.epochs = epochs, .batch_size = batch_size, .validation = dev, .seed = 7}, strata::ProgressBar{},
              EpochReport{train.size()});
  auto const result = trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, dev);
  std::cout << "dev loss " << result.loss << "\n";
  std::cout << "dev_accuracy=" << *result.accuracy << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 3;
  int batch_size = 32;
  float lr = 5e-5f;
  std::string precision = "auto";
  bool const taken = examples::read_flags(argc, argv, "--epochs N --batch-size B --lr R --precision auto|fp32|bf16",
                                          [&](std::string_view flag, examples::FlagValue value) {
                                            if (flag == "--epochs") epochs = value.number<int>();
                                            else if (flag == "--batch-size") batch_size = value.number<int>();
                                            else if (flag == "--lr") lr = value.number<float>();
                                            else if (flag == "--precision") precision = value.text();
                                            else return false;
                                            return true;
                                          });
  if (!taken) return 2;
  if (precision == "auto") precision = strata::bf16_products_available() ? "bf16" : "fp32";
  try {
    if (precision == "fp32") return fine_tune<strata::FullPrecision>(epochs, batch_size, lr);
    if (precision == "bf16") return fine_tune<strata::MixedPrecision>(epochs, batch_size, lr);
    std::cerr << "--precision " << precision << " is not one of auto, fp32, bf16\n";
    return 2;
  } catch (strata::Error const& error) {
    std::cerr << "error: " << error.what() << '\n';
    return 1;
  }
}
