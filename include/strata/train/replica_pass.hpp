#pragma once
// ReplicaPass: one replica's forward, loss and backward over its shard, the first of the
// three parts a training step is built from (train/step_runner.hpp); forward_shard is the
// piece the training step, evaluation and prediction share.

#include <cstdint>

#include "strata/core/backend.hpp"
#include "strata/nn/layer.hpp"
#include "strata/nn/loss.hpp"
#include "strata/nn/metric.hpp"
#include "strata/strategy/distribute.hpp"

namespace strata::train {

// Loss and accuracy counts of one replica; padded to a cache line so replicas never share one.
struct alignas(64) Tally {
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  std::int64_t samples = 0;

  Tally& operator+=(Tally const& other) {
    loss_sum += other.loss_sum;
    correct += other.correct;
    samples += other.samples;
    return *this;
  }
};

// Forward pass over `shard`, then the loss and (for classification) the number of correct
// predictions. The loss leaves loss_scale * d(sum of losses)/d(output) in the workspace for backward.
template <class B, class Model, class Workspace, class LossFn>
Tally forward_shard(Model const& model, Workspace& ws, float const* params, LossFn const& loss,
                    strategy::Shard const& shard, nn::ForwardContext const& context, float loss_scale = 1.0f) {
  Tally tally;
  tally.samples = shard.size;
  model.template forward<B>(ws, params, shard.features, context);
  tally.loss_sum = loss.template forward_backward<B>(ws.output(), shard.targets, ws.output_gradient(), loss_scale);
  if constexpr (LossFn::reports_accuracy) tally.correct = nn::Accuracy::count_correct<B>(ws.output(), shard.targets);
  return tally;
}

// One replica's workspace (activations sized once for its largest shard) and its pass.
// `Backend` is the device's math, `T` the precision activations are stored in.
template <class Model, class Backend, class T>
class ReplicaPass {
 public:
  using Workspace = typename Model::template Workspace<Backend, T>;

  explicit ReplicaPass(int max_shard) : workspace_(max_shard) {}

  // Forward, loss and backward on `shard` with the weights `params`, writing (or, when
  // `accumulate`, adding) the gradients to `gradients`; layer_done(l) as each layer's
  // gradients are final. Returns the shard's loss and correct counts.
  template <class LossFn, class LayerDone>
  Tally train(Model const& model, float const* params, LossFn const& loss, strategy::Shard const& shard,
              nn::ForwardContext const& context, float loss_scale, float* gradients, bool accumulate,
              LayerDone&& layer_done) {
    Tally const tally = forward_shard<Backend>(model, workspace_, params, loss, shard, context, loss_scale);
    model.template backward<Backend>(workspace_, params, gradients, shard.features, accumulate, layer_done);
    return tally;
  }

  [[nodiscard]] Workspace& workspace() { return workspace_; }

 private:
  Workspace workspace_;
};

}  // namespace strata::train
