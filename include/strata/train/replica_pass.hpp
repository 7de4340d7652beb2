#pragma once
// ReplicaPass: one replica's forward, loss and backward over its shard, the first of the
// three parts a training step is built from (train/step_runner.hpp), and what evaluation
// and prediction run per replica (train/evaluator.hpp); forward_shard is the piece they
// share. ReplicaWeights: the weights those passes read.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "strata/core/aligned_buffer.hpp"
#include "strata/core/backend.hpp"
#include "strata/core/bf16_gemm.hpp"
#include "strata/core/dtype.hpp"
#include "strata/core/product_precision.hpp"
#include "strata/nn/layer.hpp"
#include "strata/nn/loss.hpp"
#include "strata/nn/metric.hpp"
#include "strata/policy/device.hpp"
#include "strata/policy/slot.hpp"
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

// One replica's workspace (activations sized once for its largest shard) and its passes:
// train (forward, loss, backward), evaluate (forward and loss) and predict (forward), on the
// device `Device`, with activations stored in `T`. The CPU reads shards in place; the Cuda
// pass (train/replica_pass_cuda.hpp) copies them to the GPU, the next one while this one
// computes. Every pass is given the shard, whether the call before staged it (`staged`)
// and the shard of the next call (`next`, or nullptr) that a device copies ahead.
template <class Model, class Device, class T>
class ReplicaPass {
  static_assert(policy::dependent_false<Device>,
                "strata::Cuda needs #include <strata/cuda.hpp> and the strata::cuda CMake target (docs/gpu.md)");
};

template <class Model, class T>
class ReplicaPass<Model, policy::Cpu, T> {
 public:
  using backend = CpuBackend;
  using Workspace = typename Model::template Workspace<backend, T>;
  static constexpr bool copies_ahead = false;  // shards are read where they are
  struct Binding {};                           // nothing to bind on the host

  ReplicaPass(int max_shard, int /*device*/) : workspace_(max_shard) {}

  // For the duration of a replica's task (a device binds its context to the thread).
  [[nodiscard]] Binding bind() { return {}; }

  // Forward, loss and backward on `shard` with the weights `params`, writing (or, when
  // `accumulate`, adding) the gradients to `gradients`; layer_done(l) as each layer's
  // gradients are final, forward_done() between forward and backward (a profiling mark).
  // Returns the shard's loss and correct counts.
  template <class LossFn, class LayerDone, class ForwardDone>
  Tally train(Model const& model, float const* params, LossFn const& loss, strategy::Shard const& shard, bool /*staged*/,
              strategy::Shard const* /*next*/, nn::ForwardContext const& context, float loss_scale, float* gradients,
              bool accumulate, LayerDone&& layer_done, ForwardDone&& forward_done) {
    Tally const tally = forward_shard<backend>(model, workspace_, params, loss, shard, context, loss_scale);
    forward_done();
    model.template backward<backend>(workspace_, params, gradients, shard.features, accumulate, layer_done);
    return tally;
  }

  // The loss and correct counts of `shard`, in inference mode.
  template <class LossFn>
  Tally evaluate(Model const& model, float const* params, LossFn const& loss, strategy::Shard const& shard,
                 bool /*staged*/, strategy::Shard const* /*next*/) {
    return forward_shard<backend>(model, workspace_, params, loss, shard, {.backward_follows = false});
  }

  // The model's outputs for `shard` into out[0, output_width * shard.size), in host memory.
  void predict(Model const& model, float const* params, strategy::Shard const& shard, bool /*staged*/,
               strategy::Shard const* /*next*/, float* out) {
    model.template forward<backend>(workspace_, params, shard.features, {.backward_follows = false});
    std::copy_n(workspace_.output().data, workspace_.output().size(), out);
  }

  [[nodiscard]] Workspace& workspace() { return workspace_; }

 private:
  Workspace workspace_;
};

// The weights the replicas' forward passes read, made from the host's float weights: on the
// CPU the host weights themselves, or (mixed precision) one copy rounded to T. Where the
// CPU multiplies bf16 (T = bf16), also their bf16 copy, which the replica threads bind so
// that their products read it instead of rounding the weights in every product
// (core/product_precision.hpp). Then the rounded float copy of a tensor that only products
// read (nn::ParameterTensor::read_by_products_only: Dense kernels) is never written: its
// addresses only name the bf16 copy, which saves a third of the refresh's stores, and (the
// copy then being in small pages, core/aligned_buffer.hpp) its memory. Where
// strata's bf16 kernel multiplies (bf16_kernel_products(), core/dnnl.hpp), such a tensor that
// is a matrix also gets a copy in the kernel's packed layout, refreshed in the same pass, so
// that no product packs the weights; where no product reads it transposed either
// (ParameterTensor::TransposedReads::never: the first Dense of a Sequential), that packed
// copy is its only one, and its bf16 copy holds NaN, so that a read of it could not pass
// unseen. The Cuda form (train/replica_pass_cuda.hpp) keeps a
// copy on each GPU.
template <class Device, class T>
class ReplicaWeights;

template <class T>
class ReplicaWeights<policy::Cpu, T> {
 public:
  static constexpr bool rounded = !std::is_same_v<T, float>;

  // `tensors`: the model's parameter tensors (Model::parameter_tensors()); without them every
  // float of the rounded copy is kept.
  ReplicaWeights(std::span<float const> host, int /*replicas*/, std::span<nn::ParameterTensor const> tensors = {})
      : host_(host) {
    if (std::is_same_v<T, bf16> && bf16_products_available()) {
      halves_ = AlignedArray<bf16>(host.size());
      std::size_t packed_size = 0;
      for (nn::ParameterTensor const& t : tensors) {
        if (!t.read_by_products_only) continue;
        Range range{t.offset, t.offset + nn::element_count(t.shape)};
        if (bf16_kernel_products() && t.shape.size() == 2) {  // Keras's {in, out}: column-major out x in
          range.rows = int(t.shape[1]);
          range.cols = int(t.shape[0]);
          range.packed = packed_size;
          range.packed_only = t.read_transposed == nn::ParameterTensor::TransposedReads::never;
          packed_size += bf16_gemm::packed_a_size(range.rows, range.cols);
          if (range.packed_only)
            std::fill(halves_.data() + range.begin, halves_.data() + range.end,
                      bf16(std::numeric_limits<float>::quiet_NaN()));
        }
        products_only_.push_back(range);
      }
      std::sort(products_only_.begin(), products_only_.end());
      packed_ = AlignedArray<bf16>(packed_size);  // zero: the padding of the panels stays so
    }
    // With products-only tensors the float copy is written only between them (biases,
    // embeddings): in small pages, the rest of it never costs memory.
    if constexpr (rounded) copy_ = AlignedBuffer(host.size(), products_only_.empty() ? Pages::huge : Pages::small);
    for (Range const& r : products_only_)
      if (r.rows > 0) packed_matrices_.push_back({copy_.data() + r.begin, r.rows, r.cols, packed_.data() + r.packed});
    refresh(0, host.size());
  }

  // After the host weights [begin, end) changed.
  void refresh(std::size_t begin, std::size_t end) {
    if constexpr (std::is_same_v<T, bf16>) {
      if (!halves_.empty()) {  // both copies in one pass over the fresh weights
        for_runs(begin, end, [&](std::size_t from, std::size_t to, Range const* products_only) {
          if (!products_only || !products_only->packed_only)
            round_with_bf16_copy(products_only ? nullptr : copy_.data() + from, halves_.data() + from,
                                 host_.data() + from, to - from);
          if (products_only && products_only->rows > 0) pack(*products_only, from, to);
        });
        return;
      }
    }
    if constexpr (rounded) {
      std::copy(host_.data() + begin, host_.data() + end, copy_.data() + begin);
      round_to<T>(copy_.data() + begin, end - begin);
    }
  }
  [[nodiscard]] float const* operator()(int /*replica*/) const {
    if constexpr (rounded) return copy_.data();
    else return host_.data();
  }
  [[nodiscard]] static constexpr int device_of(int) { return 0; }

  // For the duration of replica r's task: its products read the bf16 copy, where there is one.
  [[nodiscard]] Bf16CopyBinding bind_copy(int /*replica*/) const {
    if (halves_.empty()) return Bf16CopyBinding({});
    return Bf16CopyBinding({copy_.data(), halves_.data(), halves_.size(), packed_matrices_});
  }

 private:
  // A products-only tensor; with rows > 0, a matrix with a packed copy at packed_ + packed,
  // and with packed_only, no other.
  struct Range {
    std::size_t begin, end;
    int rows = 0, cols = 0;
    std::size_t packed = 0;
    bool packed_only = false;
    auto operator<=>(Range const&) const = default;
  };

  // The packed copy of host elements [from, to) of `matrix`.
  void pack(Range const& matrix, std::size_t from, std::size_t to) {
    bf16_gemm::pack_a_elements(packed_.data() + matrix.packed, host_.data() + from, matrix.rows, matrix.cols,
                               from - matrix.begin, to - matrix.begin);
  }

  // Calls f(from, to, products_only) for the runs of [begin, end) inside the products-only
  // tensors (products_only: the tensor's range) and outside them (nullptr), in order.
  template <class F>
  void for_runs(std::size_t begin, std::size_t end, F&& f) const {
    auto range = std::upper_bound(products_only_.begin(), products_only_.end(), begin,
                                  [](std::size_t at, Range const& r) { return at < r.end; });
    for (std::size_t at = begin; at < end;) {
      bool const more = range != products_only_.end();
      bool const inside = more && range->begin <= at;
      std::size_t const boundary = !more ? end : inside ? range->end : range->begin;  // where this run ends
      std::size_t const to = std::min(end, boundary);
      f(at, to, inside ? &*range : nullptr);
      if (inside) ++range;
      at = to;
    }
  }

  std::span<float const> host_;
  AlignedBuffer copy_;                 // mixed precision: the weights rounded to T
  AlignedArray<bf16> halves_;          // bf16 products: copy_ in bf16
  std::vector<Range> products_only_;  // with halves_: where copy_ is not written
  AlignedArray<bf16> packed_;          // the packed copies of products-only matrices
  std::vector<PackedBf16Matrix> packed_matrices_;
};

// Binds `weights.bind_copy(r)` on this thread where the weights keep a bf16 copy for the
// products (the CPU's, above), and nothing elsewhere.
template <class Weights>
[[nodiscard]] Bf16CopyBinding bind_products_copy(Weights const& weights, int r) {
  if constexpr (requires { weights.bind_copy(r); }) return weights.bind_copy(r);
  else return Bf16CopyBinding({});
}

}  // namespace strata::train
