// With second.cpp: the umbrella header in two translation units of one program. Every
// namespace-scope function and object must be inline, or this fails to link.
#include <strata.hpp>

int train_in_second_unit();

int main() {
  strata::Sequential<strata::Dense<2, 2>> model(1);
  strata::Dataset data(strata::Matrix::Ones(2, 4), std::vector<std::int32_t>{0, 1, 0, 1});
  strata::Trainer<strata::Mirrored<2>> trainer;
  trainer.fit(model, strata::Sgd{}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 2});
  return train_in_second_unit() == 4 ? 0 : 1;
}
