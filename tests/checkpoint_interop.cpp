// The C++ half of the interoperability test with an independent Python reader:
//   checkpoint_interop write <dir>  writes ckpt.safetensors and, computed separately from the
//                                   model's matrices, expected.json (what the file must hold)
//   checkpoint_interop read <dir>   loads from_python.safetensors, written by the Python
//                                   script with its own checksum, and checks its values
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "strata.hpp"

using Model = strata::Sequential<strata::Dense<4, 3>, strata::Relu, strata::Dense<3, 2>>;

namespace {
// W as nested lists kernel[i][o] = W(o, i) (Keras' layout), from the column-major matrix.
template <int In, int Out>
nlohmann::json kernel(float const* block) {
  Eigen::Map<strata::Matrix const> w(block, Out, In);
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i < In; ++i) {
    nlohmann::json row = nlohmann::json::array();
    for (int o = 0; o < Out; ++o) row.push_back(w(o, i));
    rows.push_back(row);
  }
  return rows;
}
template <int Out>
nlohmann::json bias(float const* block) {
  return nlohmann::json(std::vector<float>(block, block + Out));
}
nlohmann::json tensors(float const* arena) {
  return {{"dense_0/kernel", kernel<4, 3>(arena + Model::offsets[0])},
          {"dense_0/bias", bias<3>(arena + Model::offsets[0] + 12)},
          {"dense_2/kernel", kernel<3, 2>(arena + Model::offsets[2])},
          {"dense_2/bias", bias<2>(arena + Model::offsets[2] + 6)}};
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: checkpoint_interop write|read <dir>\n";
    return 2;
  }
  std::filesystem::path const dir = argv[2];
  std::string const mode = argv[1];
  Model model(5);
  strata::Adam const adam{};
  auto state = adam.make_state(Model::arena_size);
  std::vector<float> g(Model::arena_size);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * float(i % 7) - 0.03f;
  for (int t = 1; t <= 3; ++t) adam.update(model.parameters(), g, state, 0, t);

  if (mode == "write") {
    std::filesystem::create_directories(dir);
    strata::save_checkpoint(dir / "ckpt.safetensors", model, adam, state, {.step = 3, .epoch = 1, .seed = 9});
    nlohmann::json expected = {{"weights", tensors(model.parameters().data())},
                               {"m", tensors(state.m.data())},
                               {"metadata", {{"step", "3"}, {"epoch", "1"}, {"rng_seed", "9"}, {"model", Model::name()},
                                             {"optimizer", "Adam"}, {"format", "strata-checkpoint"}}}};
    std::ofstream(dir / "expected.json") << expected.dump(1);
    std::cout << "wrote " << (dir / "ckpt.safetensors").string() << "\n";
    return 0;
  }
  // The Python script doubled every weight and set step to 4.
  Model loaded(99);
  auto loaded_state = adam.make_state(Model::arena_size);
  strata::Progress const p = strata::load_checkpoint(dir / "from_python.safetensors", loaded, adam, loaded_state);
  bool ok = p.step == 4;
  for (auto const& t : Model::parameter_tensors()) {
    for (std::size_t i = t.offset; i < t.offset + strata::nn::element_count(t.shape); ++i) {
      ok = ok && loaded.parameters()[i] == 2.0f * model.parameters()[i];
      ok = ok && loaded_state.m.data()[i] == state.m.data()[i] && loaded_state.v.data()[i] == state.v.data()[i];
    }
  }
  std::cout << (ok ? "python-written checkpoint loaded: doubled weights, step 4\n" : "MISMATCH\n");
  return ok ? 0 : 1;
}
