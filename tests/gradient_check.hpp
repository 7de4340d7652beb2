#pragma once
// One shared helper checks every layer's and loss's backward pass against central
// differences of the loss (dlib's test_layer habit): perturb each parameter by ±eps,
// re-run forward and loss, compare the slope with the analytic gradient.

#include <doctest/doctest.h>

#include <cmath>

#include "strata.hpp"

template <class Model, class Loss>
void check_gradients(Model& model, strata::Matrix const& x, strata::Matrix const& targets, Loss const& loss,
                     strata::nn::ForwardContext const& context, double eps = 1e-3, double tolerance = 2e-2) {
  using B = strata::CpuBackend;
  typename Model::template Workspace<B> ws(int(x.cols()));
  auto loss_at = [&] {
    model.template forward<B>(ws, model.parameters().data(), strata::view(x), context);
    return loss.template forward_backward<B>(ws.output(), strata::view(targets), ws.output_gradient(), 1.0f);
  };
  loss_at();
  model.template backward<B>(ws, model.parameters().data(), model.gradients().data(), strata::view(x), false);
  std::vector<float> const analytic(model.gradients().begin(), model.gradients().end());

  auto params = model.parameters();
  int checked = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    float const saved = params[i];
    params[i] = saved + float(eps);
    double const up = loss_at();
    params[i] = saved - float(eps);
    double const down = loss_at();
    params[i] = saved;
    double const numeric = (up - down) / (2 * eps);
    double const scale = std::max({1.0, std::abs(numeric), std::abs(double(analytic[i]))});
    INFO("parameter " << i << " of " << Model::name() << ": numeric " << numeric << ", analytic " << analytic[i]);
    CHECK(std::abs(numeric - double(analytic[i])) <= tolerance * scale);
    ++checked;
  }
  CHECK(checked == int(Model::arena_size));
}
