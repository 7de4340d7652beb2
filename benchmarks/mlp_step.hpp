#pragma once
// The benchmarked step, shared by step_benchmark (time) and step_instructions (instruction
// counts): the MLP 784-1024-1024-10, SGD with momentum, global batch 256, and the same
// arithmetic written by hand with Eigen.

#include <cmath>

#include <strata.hpp>

namespace {

constexpr int batch_size = 256;
using Model = strata::Sequential<strata::Dense<784, 1024>, strata::Relu, strata::Dense<1024, 1024>, strata::Relu,
                                 strata::Dense<1024, 10>>;
constexpr strata::Sgd optimizer{.lr = 0.01f, .momentum = 0.9f};

// Multiply-adds of one step, times 2: forward, weight gradients, input gradients (not of the first layer).
constexpr double flops_per_sample = 2.0 * (3.0 * (784.0 * 1024 + 1024.0 * 1024 + 1024.0 * 10) - 784.0 * 1024);

// The first batch of the Fashion-MNIST training set, read once.
inline strata::data::Batch const& real_batch() {
  static auto const data = strata::data::fashion_mnist(strata::data::Split::train).take(batch_size);
  static auto const stream = data.batch(batch_size).stream(0);
  static strata::data::Batch const* batch = stream->next();
  return *batch;
}

template <class Config>
using ConfigRunner = strata::train::StepRunner<Config, Model, strata::Sgd, strata::SoftmaxCrossEntropy>;
template <class Trainer>
using Runner = ConfigRunner<typename Trainer::config>;

// The same step by hand: Eigen expressions, preallocated buffers, the same update rule.
struct HandWritten {
  using M = Eigen::MatrixXf;
  using V = Eigen::VectorXf;
  M w1 = M::Random(1024, 784) * 0.05f, w2 = M::Random(1024, 1024) * 0.05f, w3 = M::Random(10, 1024) * 0.05f;
  V b1 = V::Zero(1024), b2 = V::Zero(1024), b3 = V::Zero(10);
  M gw1 = M::Zero(1024, 784), gw2 = M::Zero(1024, 1024), gw3 = M::Zero(10, 1024);
  V gb1 = V::Zero(1024), gb2 = V::Zero(1024), gb3 = V::Zero(10);
  M vw1 = M::Zero(1024, 784), vw2 = M::Zero(1024, 1024), vw3 = M::Zero(10, 1024);
  V vb1 = V::Zero(1024), vb2 = V::Zero(1024), vb3 = V::Zero(10);
  M h1 = M(1024, batch_size), h2 = M(1024, batch_size), z = M(10, batch_size);
  M d3 = M(10, batch_size), d2 = M(1024, batch_size), d1 = M(1024, batch_size);

  template <class W, class G, class Vel>
  static void momentum(W& w, G const& g, Vel& v, float scale) {
    v = optimizer.momentum * v - (optimizer.lr * scale) * g;
    w += v;
  }

  float step(Eigen::Map<M const> x, float const* labels) {
    h1.noalias() = w1 * x;
    h1 = (h1.colwise() + b1).cwiseMax(0.0f);
    h2.noalias() = w2 * h1;
    h2 = (h2.colwise() + b2).cwiseMax(0.0f);
    z.noalias() = w3 * h2;
    z.colwise() += b3;
    float loss = 0.0f;
    for (int j = 0; j < batch_size; ++j) {
      float const peak = z.col(j).maxCoeff();
      d3.col(j) = (z.col(j).array() - peak).exp();
      float const sum = d3.col(j).sum();
      int const label = int(labels[j]);
      loss += std::log(sum) + peak - z(label, j);
      d3.col(j) /= sum;
      d3(label, j) -= 1.0f;
    }
    gw3.noalias() = d3 * h2.transpose();
    gb3 = d3.rowwise().sum();
    d2.noalias() = w3.transpose() * d3;
    d2 = (h2.array() > 0.0f).select(d2, 0.0f);
    gw2.noalias() = d2 * h1.transpose();
    gb2 = d2.rowwise().sum();
    d1.noalias() = w2.transpose() * d2;
    d1 = (h1.array() > 0.0f).select(d1, 0.0f);
    gw1.noalias() = d1 * x.transpose();
    gb1 = d1.rowwise().sum();
    float const scale = 1.0f / float(batch_size);
    momentum(w1, gw1, vw1, scale), momentum(w2, gw2, vw2, scale), momentum(w3, gw3, vw3, scale);
    momentum(b1, gb1, vb1, scale), momentum(b2, gb2, vb2, scale), momentum(b3, gb3, vb3, scale);
    return loss;
  }
};

}  // namespace
