#include "strata.hpp"
struct NotASidecarCallback {
  void on_epoch_end(strata::EpochLogs const&) {}  // a fit callback: the evaluator never calls it
};
struct Printed {
  void on_checkpoint_evaluated(strata::CheckpointEvaluation const&) {}
};
int main() {
  strata::Trainer<> trainer;
  strata::Sequential<strata::Dense<4, 2>> model;
  strata::Dataset data(strata::Matrix::Zero(4, 8), std::vector<std::int32_t>(8, 1));
  strata::SidecarEvaluator const sidecar{.checkpoint = "ckpt", .max_evaluations = 1};
#ifdef STRATA_MUST_FAIL
  (void)sidecar.run(trainer, model, strata::SoftmaxCrossEntropy{}, data, NotASidecarCallback{});
#else
  (void)sidecar.run(trainer, model, strata::SoftmaxCrossEntropy{}, data, Printed{});
#endif
}
