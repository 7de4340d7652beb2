// A custom training loop with the tf.distribute-style API: Strategy::distribute splits each
// global batch, Strategy::run runs the step on every replica, ReplicaContext::all_reduce
// sums gradients, and each replica updates the slice of the shared weights it owns. A
// LoopProfiler times the loop's steps, each replica's run and its all_reduce calls, and a
// Profiler prints where the time went at the end.
//
//   custom_loop [--epochs N]

#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <strata.hpp>

#include "command_line.hpp"

int main(int argc, char** argv) {
  int epochs = 3;
  bool const taken =
      examples::read_flags(argc, argv, "--epochs N", [&](std::string_view flag, examples::FlagValue value) {
        if (flag != "--epochs") return false;
        epochs = value.number<int>();
        return true;
      });
  if (!taken) return 2;
  auto const train = strata::data::fashion_mnist(strata::data::Split::train).take(20000);
  auto const test = strata::data::fashion_mnist(strata::data::Split::test);

  using Model = strata::Sequential<strata::Dense<784, 128>, strata::Relu, strata::Dense<128, 10>>;
  using Backend = strata::CpuBackend;
  constexpr int global_batch = 128;

  Model model(1);
  strata::Strategy<strata::Mirrored<2>> strategy;
  int const replicas = strategy.num_replicas_in_sync();
  strata::SoftmaxCrossEntropy const loss;
  strata::Adam const adam{.lr = 1e-3f};
  auto adam_state = adam.make_state(Model::arena_size);

  // Per replica: activations for its shard, and its own gradient arena.
  std::vector<Model::Workspace<Backend>> workspaces;
  std::vector<strata::AlignedBuffer> gradients;
  for (int r = 0; r < replicas; ++r) {
    workspaces.emplace_back(global_batch / replicas + 1);
    gradients.emplace_back(Model::arena_size);
  }

  std::int64_t step = 0;
  auto batches = train.shuffle(3).batch(global_batch);
  strata::LoopProfiler profiled_loop(strategy);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double loss_sum = 0.0;
    std::int64_t samples = 0;
    for (auto const& batch : strategy.distribute(batches)) {
      auto const profiled_step = profiled_loop.step();
      ++step;
      auto losses = strategy.run([&](strata::ReplicaContext& ctx, strata::Shard const& shard) {
        int const r = ctx.replica_id_in_sync_group();
        float* grads = gradients[std::size_t(r)].data();
        float* weights = model.parameters().data();
        // Forward, loss scaled by 1/global batch (so the summed gradient is the batch mean), backward.
        model.forward<Backend>(workspaces[std::size_t(r)], weights, shard.features, {.training = true});
        double const shard_loss = loss.forward_backward<Backend>(workspaces[std::size_t(r)].output(), shard.targets,
                                                                 workspaces[std::size_t(r)].output_gradient(),
                                                                 1.0f / float(shard.global_batch_size));
        model.backward<Backend>(workspaces[std::size_t(r)], weights, grads, shard.features, false);
        // Sum the gradients of all replicas, then update this replica's slice of the shared weights.
        std::span<float> all(grads, Model::arena_size);
        ctx.all_reduce(all, strata::ReduceOp::sum);
        auto const slice = ctx.owned_slice(Model::arena_size);
        adam.update(model.parameters().subspan(slice.begin, slice.size()), all.subspan(slice.begin, slice.size()),
                    adam_state, slice.begin, step);
        return shard_loss;
      }, batch);
      loss_sum += strategy.reduce(strata::ReduceOp::sum, losses);
      samples += batch.size();
    }
    std::cout << "epoch " << epoch + 1 << ": mean training loss " << loss_sum / double(samples) << '\n';
  }
  profiled_loop.finish(strata::Profiler{});

  strata::Trainer<strata::Mirrored<2>> evaluator;
  auto const result = evaluator.evaluate(model, loss, test);
  std::cout << "test_accuracy=" << *result.accuracy << std::endl;
}
