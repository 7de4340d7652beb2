// strata's side of the anchor comparison (benchmarks/anchors/run): the benchmarked MLP
// 784-1024-1024-10 trained with Trainer::fit on Fashion-MNIST, SGD with momentum, global
// batch 256, exactly `steps` steps per epoch (no partial batch), no validation inside the
// timed epochs. Prints one JSON line, the same fields the Keras and PyTorch anchors print.
// Built three times: strata_anchor (Eigen's GEMM), strata_anchor_openblas (linked to strata::blas)
// and strata_anchor_dnnl (linked to strata::dnnl: bf16 products under MixedPrecision on AVX512_BF16);
// and twice more with MPI (strata_anchor_mpi[_openblas]), which add MultiWorkerMirrored<1>:
// every process of the job prints its line, with its rank; and with ZeroMQ
// (strata_anchor_ps_openblas, strata_anchor_ps_dnnl), which adds Trainer<ParameterServer<2, S>>
// in one process, in fp32, (_mixed) under MixedPrecision, (_accum4) with GradAccum<4> and
// (_compress) with Compress<bf16>.
//
//   strata_anchor --strategy one_device|mirrored2|one_device_mixed|mirrored2_mixed [--epochs 3] [--steps 234]
//   mpirun -np 2 strata_anchor_mpi --strategy multi_worker1 [--epochs 3] [--steps 234]
//   strata_anchor_ps_openblas --strategy ps2x1|ps2x2|ps2x1_mixed|ps2x2_mixed|ps2x1_accum4|ps2x1_mixed_accum4|
//                                        ps2x1_compress [--staleness 2] [--epochs 3] [--steps 234]

#include <sys/resource.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

#include <strata.hpp>
#if defined(STRATA_ANCHOR_MPI)
#include <strata/multi_worker.hpp>
#endif
#if defined(STRATA_ANCHOR_PS)
#include <strata/ps.hpp>
#endif

#include "../mlp_step.hpp"

namespace {

constexpr int max_steps = 60000 / batch_size;  // full global batches in the training set

// `options`: the trainer's constructor arguments.
template <class Trainer, class... Options>
void run(std::string system, int epochs, int steps, Options const&... options) {
#if defined(STRATA_DNNL)
  system += strata::detail::openblas_beside_dnnl() ? " + oneDNN and OpenBLAS" : " + oneDNN";
#elif defined(STRATA_OPENBLAS)
  system += " + OpenBLAS";
#else
  system += " (Eigen GEMM)";
#endif
  auto const train = strata::data::fashion_mnist(strata::data::Split::train).take(std::size_t(steps) * batch_size);
  auto const test = strata::data::fashion_mnist(strata::data::Split::test);
  Model model(/*seed=*/2026);
  Trainer trainer(options...);
  auto const history = trainer.fit(model, optimizer, strata::SoftmaxCrossEntropy{}, train,
                                   {.epochs = epochs, .batch_size = batch_size, .seed = 7});
  auto const result = trainer.evaluate(model, strata::SoftmaxCrossEntropy{}, test);

  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  int rank = 0;
  if constexpr (requires { trainer.strategy(); }) rank = trainer.strategy().processes().process();
  std::cout << "{\"system\": \"" << system << "\", \"rank\": " << rank
            << ", \"version\": \"GEMM: " << strata::cpu_gemm_engine()
            << "\", \"samples_per_epoch\": " << train.size() << ", \"epoch_seconds\": [";
  char const* separator = "";
  for (double s : history.epoch_seconds()) std::cout << std::exchange(separator, ", ") << s;
  std::cout << "], \"test_accuracy\": " << *result.accuracy << ", \"peak_rss_mb\": " << double(usage.ru_maxrss) / 1024.0
            << "}" << std::endl;
}

#if defined(STRATA_ANCHOR_PS)
// Trainer<ParameterServer<2, Servers>, Policies...>, named with `policies` (", MixedPrecision").
template <int Servers, class... Policies>
void run_ps(std::string const& policies, int staleness, int epochs, int steps) {
  run<strata::Trainer<strata::ParameterServer<2, Servers>, Policies...>>(
      "strata ParameterServer<2, " + std::to_string(Servers) + ">" + policies + ", staleness " + std::to_string(staleness),
      epochs, steps, strata::ps::TrainerOptions{.staleness = staleness});
}
#endif

}  // namespace

int main(int argc, char** argv) {
#if defined(STRATA_ANCHOR_MPI)
  strata::comm::MpiEnvironment mpi(argc, argv);
#endif
  std::string strategy = "mirrored2";
  int epochs = 3;
  int steps = max_steps;
  [[maybe_unused]] int staleness = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const flag = argv[i];
    if (flag == "--strategy") strategy = argv[i + 1];
    else if (flag == "--staleness") staleness = std::atoi(argv[i + 1]);
    else if (flag == "--epochs") epochs = std::atoi(argv[i + 1]);
    else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    else {
      std::cerr << "unknown flag " << flag
                << "; use --strategy one_device|mirrored2|one_device_mixed|mirrored2_mixed --epochs N --steps S\n";
      return 2;
    }
  }
  if (epochs < 1 || steps < 1 || steps > max_steps) {
    std::cerr << "--epochs " << epochs << " must be >= 1 and --steps " << steps << " in [1, " << max_steps << "]\n";
    return 2;
  }
  try {
    if (strategy == "one_device") run<strata::Trainer<strata::OneDevice>>("strata OneDevice", epochs, steps);
    else if (strategy == "mirrored2") run<strata::Trainer<strata::Mirrored<2>>>("strata Mirrored<2>", epochs, steps);
    else if (strategy == "one_device_mixed")
      run<strata::Trainer<strata::OneDevice, strata::MixedPrecision>>("strata OneDevice, MixedPrecision", epochs, steps);
    else if (strategy == "mirrored2_mixed")
      run<strata::Trainer<strata::Mirrored<2>, strata::MixedPrecision>>("strata Mirrored<2>, MixedPrecision", epochs,
                                                                         steps);
#if defined(STRATA_ANCHOR_MPI)
    else if (strategy == "multi_worker1")
      run<strata::Trainer<strata::MultiWorkerMirrored<1>>>("strata MultiWorkerMirrored<1>, 2 processes", epochs, steps);
#endif
#if defined(STRATA_ANCHOR_PS)
    else if (strategy == "ps2x1") run_ps<1>("", staleness, epochs, steps);
    else if (strategy == "ps2x2") run_ps<2>("", staleness, epochs, steps);
    else if (strategy == "ps2x1_mixed") run_ps<1, strata::MixedPrecision>(", MixedPrecision", staleness, epochs, steps);
    else if (strategy == "ps2x2_mixed") run_ps<2, strata::MixedPrecision>(", MixedPrecision", staleness, epochs, steps);
    else if (strategy == "ps2x1_accum4") run_ps<1, strata::GradAccum<4>>(", GradAccum<4>", staleness, epochs, steps);
    else if (strategy == "ps2x1_mixed_accum4")
      run_ps<1, strata::MixedPrecision, strata::GradAccum<4>>(", MixedPrecision, GradAccum<4>", staleness, epochs, steps);
    else if (strategy == "ps2x1_compress")
      run_ps<1, strata::Compress<strata::bf16>>(", Compress<bf16>", staleness, epochs, steps);
#endif
    else {
      std::cerr << "--strategy " << strategy
                << " is not one of one_device, mirrored2, one_device_mixed, mirrored2_mixed (and multi_worker1 in the "
                   "_mpi programs; ps2x1, ps2x2, ps2x1_mixed, ps2x2_mixed, ps2x1_accum4, ps2x1_mixed_accum4, "
                   "ps2x1_compress in the _ps programs)\n";
      return 2;
    }
  } catch (strata::Error const& error) {
    std::cerr << "error: " << error.what() << '\n';
    return 1;
  }
  return 0;
}
