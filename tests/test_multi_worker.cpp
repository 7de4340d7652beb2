// MultiWorkerMirrored<LocalN> across the processes of an MPI job, run under mpirun with 2
// and 3 processes (CTest multi_worker.np2, multi_worker.np3). The oracle is a single-process
// run: MultiWorkerMirrored<LocalN> on P processes against Mirrored<LocalN × P> in one, on the
// same data, seed and batches. Every process runs the same cases in the same order; the exit
// code is the worst over all processes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "random_matrix.hpp"
#include "strata.hpp"
#include "strata/multi_worker.hpp"

using namespace strata;

namespace {
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

using Mlp = Sequential<Dense<20, 32>, Relu, Dense<32, 24>, Tanh, Dense<24, 5>>;

data::Dataset synthetic(int samples) {
  Rng rng(11);
  Matrix x = random_matrix(rng, 20, samples);
  std::vector<std::int32_t> labels;
  for (int j = 0; j < samples; ++j) labels.push_back(std::int32_t(rng() % 5));
  return {std::move(x), labels};
}

// Trains Trainer<Ps...> on 480 samples in global batches of 24 (20 steps, shuffled); the
// model starts from `seed`. Returns the weights.
template <class... Ps, class Opt>
std::vector<float> train_weights(std::uint64_t seed, Opt const& optimizer, float clip = 0.0f) {
  Mlp model(seed);
  Trainer<Ps...> trainer;
  trainer.fit(model, optimizer, SoftmaxCrossEntropy{}, synthetic(480),
              {.epochs = 1, .batch_size = 24, .seed = 5, .clip_global_norm = clip});
  return {model.parameters().begin(), model.parameters().end()};
}

// The largest difference relative to the largest weight.
double relative_difference(std::vector<float> const& a, std::vector<float> const& b) {
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return worst / scale;
}

// Every process's weights, as the chief's: the same bits everywhere.
bool same_on_every_process(std::vector<float> const& weights) {
  std::vector<float> chief = weights;
  MPI_Bcast(chief.data(), int(chief.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int const mine = chief == weights ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

// MultiWorkerMirrored<LocalN> on this job against Mirrored<LocalN × processes> in one process.
template <int LocalN, int Total, class... Ps, class Opt>
void check_against_one_process(Opt const& optimizer, float clip, double tolerance) {
  // Workers start from different weights: the chief's broadcast makes them one model.
  auto const multi = train_weights<MultiWorkerMirrored<LocalN>, Ps...>(100 + std::uint64_t(world_rank()), optimizer, clip);
  auto const single = train_weights<Mirrored<Total>, Ps...>(100, optimizer, clip);
  CHECK(same_on_every_process(multi));
  CHECK(relative_difference(multi, single) < tolerance);
  Mlp const start(100);
  std::vector<float> const initial(start.parameters().begin(), start.parameters().end());
  CHECK(relative_difference(multi, initial) > 1e-3);  // it trained
}

template <int LocalN, int Total>
void check_all() {
  check_against_one_process<LocalN, Total>(Adam{.lr = 1e-2f}, 0.0f, 1e-5);
  check_against_one_process<LocalN, Total, GradAccum<2>>(Sgd{.lr = 0.1f, .momentum = 0.9f}, 0.5f, 1e-5);
  check_against_one_process<LocalN, Total>(Lamb{.lr = 1e-2f}, 0.0f, 1e-5);
  // bf16 weights for forward: a sum in another order can round one weight to the next
  // 16-bit value, so the runs agree to bf16's precision.
  check_against_one_process<LocalN, Total, MixedPrecision>(Adam{.lr = 1e-2f}, 0.0f, 1e-2);
}
}  // namespace

TEST_CASE("MultiWorkerMirrored across processes trains as Mirrored over all replicas in one process") {
  if (world_size() == 2) check_all<2, 4>();
  else if (world_size() == 3) check_all<1, 3>();
  else MESSAGE("run under mpirun with 2 or 3 processes");
}

TEST_CASE("the same job run twice gives the same bits") {
  auto const first = train_weights<MultiWorkerMirrored<2>>(7, Adam{});
  CHECK(train_weights<MultiWorkerMirrored<2>>(7, Adam{}) == first);
}

TEST_CASE("a worker whose model differs in shape is an error on every worker, naming both sizes") {
  data::Dataset const data = synthetic(48);
  Trainer<MultiWorkerMirrored<1>> trainer;
  auto fit = [&](auto model) { trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, data, {.batch_size = 12}); };
  using Small = Sequential<Dense<20, 8>, Relu, Dense<8, 5>>;
  std::string const expected = "process 0 (the chief) has " + std::to_string(Mlp::arena_size) +
                               " floats of weights but process 1 has " + std::to_string(Small::arena_size);
  if (world_rank() == 0) {
    CHECK_THROWS_WITH_AS(fit(Mlp(1)), doctest::Contains(expected.c_str()), ConfigError);
  } else {
    CHECK_THROWS_WITH_AS(fit(Small(1)), doctest::Contains(expected.c_str()), ConfigError);
  }
}

int main(int argc, char** argv) {
  comm::MpiEnvironment mpi(argc, argv);
  doctest::Context context(argc, argv);
  int const failed = context.run();
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
