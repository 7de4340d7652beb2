// TensorBoard event files: CRC-32C against its published check value, the TFRecord framing
// read back with every CRC checked, corruption refused, and the TensorBoard callback's
// scalars against the History fit returns. (tests/python/check_tensorboard.py reads the same
// files with TensorBoard's own reader.)

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <strata.hpp>
#include <strata/tensorboard.hpp>

#include "message_of.hpp"
#include "temp_dir.hpp"

using namespace strata;

namespace {
using Model = Sequential<Dense<784, 32>, Relu, Dense<32, 10>>;

std::filesystem::path only_event_file(std::filesystem::path const& dir) {
  std::vector<std::filesystem::path> files;
  for (auto const& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find("tfevents") != std::string::npos) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  return files[0];
}

// tag -> (step, value) in file order.
std::map<std::string, std::vector<std::pair<std::int64_t, float>>> scalars_of(std::filesystem::path const& file) {
  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> out;
  for (auto const& e : profile::read_event_file(file))
    for (auto const& [tag, value] : e.scalars) out[tag].emplace_back(e.step, value);
  return out;
}
}  // namespace

TEST_CASE("CRC-32C gives its check value and TFRecord masking is TensorFlow's") {
  std::string const digits = "123456789";
  CHECK(profile::crc32c(std::as_bytes(std::span(digits))) == 0xE3069283u);
  CHECK(profile::crc32c({}) == 0u);
  // TensorFlow's Mask: rotate right by 15, add 0xa282ead8.
  std::uint32_t const c = 0xE3069283u;
  CHECK(profile::masked_crc32c(std::as_bytes(std::span(digits))) == ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST_CASE("an event file reads back, and a corrupted or cut one is refused with its offset") {
  TempDir const scratch;
  auto const& dir = scratch.path;
  std::filesystem::path path;
  {
    profile::EventFileWriter writer(dir);
    writer.scalar("loss", 3, 0.25);
    writer.scalar("loss", 4, 0.125);
    writer.flush();
    path = writer.path();
  }
  CHECK(path.filename().string().rfind("events.out.tfevents.", 0) == 0);
  auto const events = profile::read_event_file(path);
  REQUIRE(events.size() == 3);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[1].step == 3);
  REQUIRE(events[1].scalars.size() == 1);
  CHECK(events[1].scalars[0] == std::pair<std::string, float>("loss", 0.25f));
  CHECK(events[2].scalars[0].second == 0.125f);
  CHECK(events[2].wall_time > 1.7e9);

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto rewrite = [&](std::string const& content) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
  };
  std::string flipped = bytes;
  flipped[bytes.size() - 6] ^= 0x01;  // inside the last event's data
  rewrite(flipped);
  CHECK(message_of([&] { (void)profile::read_event_file(path); }).find("the data's CRC does not match") !=
        std::string::npos);
  rewrite(bytes.substr(0, bytes.size() - 3));
  CHECK(message_of([&] { (void)profile::read_event_file(path); }).find("a record cut short") != std::string::npos);
  rewrite("not an event file at all");
  CHECK(message_of([&] { (void)profile::read_event_file(path); }).find("at byte 0") != std::string::npos);
}

TEST_CASE("TensorBoard writes Keras' epoch scalars, batch scalars every update_freq, and the run's figures") {
  TempDir const scratch;
  auto const& dir = scratch.path;
  Dataset const train = data::fashion_mnist(data::Split::train).take(600);
  Model model(7);
  Trainer<Mirrored<2>> trainer;
  auto const history = trainer.fit(model, Adam{.lr = 2e-3f}, SoftmaxCrossEntropy{}, train,
                                   {.epochs = 2, .batch_size = 100, .validation = train.take(200)},
                                   TensorBoard{dir, {.update_freq = 2}});
  auto const t = scalars_of(only_event_file(dir / "train"));
  auto const v = scalars_of(only_event_file(dir / "validation"));
  REQUIRE(t.count("epoch_loss"));
  REQUIRE(t.at("epoch_loss").size() == 2);
  for (int e = 0; e < 2; ++e) {
    CHECK(t.at("epoch_loss")[std::size_t(e)] == std::pair<std::int64_t, float>(e, float(history["loss"][std::size_t(e)])));
    CHECK(t.at("epoch_accuracy")[std::size_t(e)].second == float(history["accuracy"][std::size_t(e)]));
    CHECK(v.at("epoch_loss")[std::size_t(e)].second == float(history["val_loss"][std::size_t(e)]));
    CHECK(v.at("epoch_accuracy")[std::size_t(e)].second == float(history["val_accuracy"][std::size_t(e)]));
    CHECK(t.at("epoch_learning_rate")[std::size_t(e)].second == 2e-3f);
    CHECK(t.at("epoch_step_time_ms")[std::size_t(e)].second > 0.0f);
    CHECK(t.at("epoch_peak_rss_mb")[std::size_t(e)].second > 1.0f);
  }
  // 12 batches, every second one: steps 2, 4, ..., 12.
  REQUIRE(t.count("batch_loss"));
  std::vector<std::int64_t> steps;
  for (auto const& [step, value] : t.at("batch_loss")) steps.push_back(step);
  CHECK(steps == std::vector<std::int64_t>{2, 4, 6, 8, 10, 12});
  CHECK(t.count("batch_step_time_ms"));
  CHECK_FALSE(t.count("epoch_all_reduce_p50_ms"));  // Mirrored on the CPU runs no collective
  CHECK_FALSE(t.count("epoch_loss_scale"));          // nor has a loss scale in fp32

  // A log directory that cannot be made is an IoError naming it, before any training.
  auto const blocker = dir / "a_file";
  std::ofstream(blocker) << "x";
  Model other(7);
  auto const before = std::vector<float>(other.parameters().begin(), other.parameters().end());
  std::string const error = message_of([&] {
    trainer.fit(other, Adam{}, SoftmaxCrossEntropy{}, train.take(100), {.batch_size = 100},
                TensorBoard{blocker / "logs"});
  });
  CHECK(error.find("TensorBoard: cannot create the log directory") != std::string::npos);
  CHECK(error.find("a_file") != std::string::npos);
  CHECK(std::vector<float>(other.parameters().begin(), other.parameters().end()) == before);
  CHECK_THROWS_AS(TensorBoard(dir, {.update_freq = -1}), ConfigError);
}

TEST_CASE("a SidecarEvaluator's checkpoints go to validation/ as Keras' evaluation_*_vs_iterations") {
  TempDir const scratch;
  Dataset const train = data::fashion_mnist(data::Split::train).take(600);
  Model model(8);
  Trainer<Mirrored<2>> trainer;
  trainer.fit(model, Adam{.lr = 2e-3f}, SoftmaxCrossEntropy{}, train, {.epochs = 2, .batch_size = 100},
              ModelCheckpoint{.directory = scratch.path / "ckpt"});
  Model evaluated(9);
  SidecarEvaluator sidecar{.checkpoint = scratch.path / "ckpt", .until_epochs = 2};
  SidecarReport const report =
      sidecar.run(trainer, evaluated, SoftmaxCrossEntropy{}, train.take(200), TensorBoard{scratch.path / "logs"});
  REQUIRE(report.evaluations.size() == 1);  // the newest: step 12
  auto const v = scalars_of(only_event_file(scratch.path / "logs" / "validation"));
  Evaluation const& e = report.evaluations[0].evaluation;
  CHECK(v.at("evaluation_loss_vs_iterations") == std::vector<std::pair<std::int64_t, float>>{{12, float(e.loss)}});
  CHECK(v.at("evaluation_accuracy_vs_iterations") ==
        std::vector<std::pair<std::int64_t, float>>{{12, float(*e.accuracy)}});
  CHECK(e.loss == trainer.evaluate(model, SoftmaxCrossEntropy{}, train.take(200)).loss);
}

TEST_CASE("under fp16 the loss scale is logged, and update_freq 0 writes epoch scalars only") {
  TempDir const scratch;
  auto const& dir = scratch.path;
  Dataset const train = data::fashion_mnist(data::Split::train).take(300);
  Model model(7);
  Trainer<OneDevice, MixedPrecisionFp16> trainer;
  trainer.fit(model, Adam{}, SoftmaxCrossEntropy{}, train, {.epochs = 2, .batch_size = 100}, TensorBoard{dir});
  auto const t = scalars_of(only_event_file(dir / "train"));
  REQUIRE(t.count("epoch_loss_scale"));
  CHECK(t.at("epoch_loss_scale").size() == 2);
  CHECK(t.at("epoch_loss_scale")[0].second >= 1.0f);  // DynamicLossScale starts at 2^15 and halves on overflow
  for (auto const& [tag, values] : t) CHECK_MESSAGE(tag.rfind("epoch_", 0) == 0, tag);
  CHECK(profile::read_event_file(only_event_file(dir / "validation")).size() == 1);  // the file version only
}
