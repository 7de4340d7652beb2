// BERT on one GPU: the case study's model (all-MiniLM-L6-v2's shape: 6 layers, hidden 384,
// 12 heads, FFN 1536, vocabulary 30,522, length 64, a pooler, dropout and a 2-class head)
// fine-tuned by Trainer<OneDevice, Cuda, Precision> with AdamW, and its inference, in
// sequences per second. The counterpart is benchmarks/gpu/torch_bert.py (PyTorch, the same
// architecture and sizes); scripts/gpu-check runs both and prints them side by side.
//
// Throughput does not depend on the weights' values, so the weights are random and the
// sequences synthetic: [CLS], 6 to 62 random word pieces, [SEP], then padding, lengths
// spread over the range as short review sentences are. On the GPU strata computes the
// padded batch (docs/bert.md), as PyTorch does.
//
//   gpu_bert [--samples N] [--batch-size B] [--precisions fp32,bf16]
//
// Prints one JSON object: per precision, training and inference sequences/s (median of
// three timed epochs after a warm-up one). Without a GPU it says so and exits 77.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "strata.hpp"
#include "strata/cuda.hpp"

using namespace strata;

namespace {

constexpr int max_length = 64;
using MiniLM = Sequential<Bert<6, 384, 12, 1536, 30522, max_length>, BertPooler<384, max_length>, Dropout, Dense<384, 2>>;

data::Dataset sequences(int n) {
  Rng rng(11);
  Matrix ids = Matrix::Zero(max_length, n);
  std::vector<std::int32_t> labels(std::size_t(n), 0);
  for (int s = 0; s < n; ++s) {
    int const length = 8 + int(rng() % std::uint64_t(max_length - 7));
    ids(0, s) = 101;  // [CLS]
    for (int t = 1; t + 1 < length; ++t) ids(t, s) = float(1000 + rng() % 29000);
    ids(length - 1, s) = 102;  // [SEP]
    labels[std::size_t(s)] = int(rng() % 2);
  }
  return {ids, labels};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class Precision>
std::string measure(data::Dataset const& data, int batch_size) {
  MiniLM model(1, {}, {}, Dropout{0.1f}, {});
  Trainer<OneDevice, Cuda, Precision> trainer;
  std::vector<double> train_seconds, inference_seconds;
  for (int round = 0; round < 4; ++round) {  // round 0 warms up (kernels, cuBLAS heuristics, memory)
    auto const start = std::chrono::steady_clock::now();
    trainer.fit(model, AdamW{.lr = 2e-5f}, SoftmaxCrossEntropy{}, data,
                {.epochs = 1, .batch_size = batch_size, .seed = std::uint64_t(round)});
    auto const trained = std::chrono::steady_clock::now();
    (void)trainer.evaluate(model, SoftmaxCrossEntropy{}, data, batch_size);
    auto const evaluated = std::chrono::steady_clock::now();
    if (round == 0) continue;
    train_seconds.push_back(std::chrono::duration<double>(trained - start).count());
    inference_seconds.push_back(std::chrono::duration<double>(evaluated - trained).count());
  }
  std::ostringstream out;
  out << "{\"train_seq_per_s\": " << double(data.size()) / median(train_seconds)
      << ", \"inference_seq_per_s\": " << double(data.size()) / median(inference_seconds) << "}";
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 8192, batch_size = 32;
  std::string precisions = "fp32,bf16";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const flag = argv[i];
    if (flag == "--samples") samples = std::atoi(argv[i + 1]);
    else if (flag == "--batch-size") batch_size = std::atoi(argv[i + 1]);
    else if (flag == "--precisions") precisions = argv[i + 1];
    else {
      std::cerr << "unknown flag " << flag << "; use --samples N --batch-size B --precisions fp32,bf16\n";
      return 2;
    }
  }
  if (cuda::device_count() == 0) {
    std::cout << "SKIPPED: no CUDA device here; this benchmark needs an NVIDIA GPU\n";
    return 77;
  }
  try {
    auto const data = sequences(samples);
    std::cout << "{\"device\": \"" << cuda::device_info(0).name << "\", \"samples\": " << samples
              << ", \"batch\": " << batch_size << ", \"length\": " << max_length;
    if (precisions.find("fp32") != std::string::npos) std::cout << ", \"fp32\": " << measure<FullPrecision>(data, batch_size);
    if (precisions.find("bf16") != std::string::npos) std::cout << ", \"bf16\": " << measure<MixedPrecision>(data, batch_size);
    std::cout << "}" << std::endl;
    return 0;
  } catch (strata::Error const& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
}
