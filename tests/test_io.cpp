// Checkpoints: the safetensors format against its specification, every kind of damaged
// file, optimizer-state round trips, layout independence across strategies, and
// BackupAndRestore resuming bit for bit.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <stop_token>
#include <thread>
#include <nlohmann/json.hpp>

#include "strata.hpp"
#include "temp_dir.hpp"

using namespace strata;

namespace {
using Model = Sequential<Dense<784, 24>, Relu, Dropout, Dense<24, 10>>;
using Other = Sequential<Dense<784, 16>, Relu, Dense<16, 10>>;

Dataset const& fashion() {
  static Dataset const data = data::fashion_mnist(data::Split::test).take(400);
  return data;
}

Model make_model(std::uint64_t seed) { return Model(seed, {}, {}, Dropout{0.2f}, {}); }

std::vector<float> weights(Model const& m) { return {m.parameters().begin(), m.parameters().end()}; }

std::string slurp(std::filesystem::path const& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spill(std::filesystem::path const& p, std::string const& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// The error message of `f`, or "" when it does not throw E.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (E const& e) {
    return e.what();
  }
  return "";
}

// Stops training by throwing at optimizer step `step`: a crash that fit cannot catch.
struct CrashAt {
  std::int64_t step;
  void on_batch_end(BatchLogs const&, TrainingState const& s) {
    if (s.progress.step == step) throw std::runtime_error("simulated crash");
  }
};
}  // namespace

TEST_CASE("safetensors: the file layout is the specification's, values and metadata round-trip") {
  TempDir dir;
  std::vector<float> a{1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f}, b{42.0f};
  std::vector<io::TensorRef> tensors{{"layer/a", {2, 3}, a}, {"b", {1}, b}};
  io::write_safetensors(dir.path / "t.safetensors", tensors, {{"note", "hello"}});

  // Independent parse of the raw bytes: u64 LE header length, JSON, data.
  std::string const raw = slurp(dir.path / "t.safetensors");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(raw[std::size_t(i)])) << (8 * i);
  CHECK(n % 8 == 0);  // the data starts 8-byte aligned
  CHECK(raw.size() == 8 + n + 7 * sizeof(float));
  auto const header = nlohmann::json::parse(raw.substr(8, n));
  CHECK(header["layer/a"]["dtype"] == "F32");
  CHECK(header["layer/a"]["shape"] == nlohmann::json::array({2, 3}));
  CHECK(header["layer/a"]["data_offsets"] == nlohmann::json::array({0, 24}));
  CHECK(header["b"]["data_offsets"] == nlohmann::json::array({24, 28}));
  CHECK(header["__metadata__"]["note"] == "hello");
  CHECK(std::string(header["__metadata__"]["checksum"]).rfind("crc32:", 0) == 0);
  float third;
  std::memcpy(&third, raw.data() + 8 + n + 2 * sizeof(float), sizeof third);
  CHECK(third == 3.25f);

  auto const file = io::SafetensorsFile::read(dir.path / "t.safetensors");
  CHECK(file.names() == std::vector<std::string>{"layer/a", "b"});
  auto const back = file.f32("layer/a", {2, 3});
  CHECK(std::vector<float>(back.begin(), back.end()) == a);
  CHECK(file.metadata().at("note") == "hello");
  CHECK(error_of<ShapeError>([&] { (void)file.f32("layer/a", {3, 2}); }).find("has shape [2, 3], the model expects [3, 2]") !=
        std::string::npos);
  CHECK(error_of<IoError>([&] { (void)file.f32("missing", {1}); }).find("no tensor named 'missing'") != std::string::npos);
  // A file without a checksum (written by another tool) still reads.
  std::string plain = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  plain.append((8 - plain.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  bytes[0] = char(plain.size());
  bytes += plain + std::string("\0\0\x80\x3f", 4);  // 1.0f
  auto const foreign = io::SafetensorsFile::parse(std::as_bytes(std::span(bytes.data(), bytes.size())), "foreign");
  CHECK(!foreign.has_checksum());
  CHECK(foreign.f32("x", {1})[0] == 1.0f);
}

TEST_CASE("the header JSON reader accepts exactly what nlohmann/json accepts, and quote() round-trips") {
  std::vector<std::string> const inputs{
      R"({})", R"({"a":1})", R"( {"a" : [1, 2.5, -3e-2, true, false, null, {"b": "c"}]} )", R"({"s":"\"\\\/\b\f\n\r\t"})",
      R"({"u":"\u00e9\u20ac\ud83d\ude00"})", R"([])", R"("text")", R"(0)", R"({"a":1,})", R"({"a" 1})", R"({a:1})",
      R"({"a":01})", R"({"a":1.})", R"({"a":.5})", R"({"a":1e})", R"({"a":"\x"})", R"({"a":"\ud800"})",
      R"({"a":"\udc00x"})", "{\"a\":\"\x01\"}", R"({"a":tru})", R"({"a":[1,2})", R"({"a":1} x)", R"({"a":-})", "",
      std::string(100, '[') + std::string(100, ']')};
  for (auto const& input : inputs) {
    CAPTURE(input);
    bool const reference = nlohmann::json::accept(input) &&
                           input != std::string(100, '[') + std::string(100, ']');  // strata stops at depth 64
    bool ours = true;
    try {
      (void)io::json::parse(input, "test");
    } catch (IoError const& e) {
      ours = false;
      CHECK(std::string(e.what()).find("test: the JSON header is malformed at byte") == 0);
    }
    CHECK(ours == reference);
  }
  auto const v = io::json::parse(R"({"u":"\u00e9\u20ac\ud83d\ude00","n":[18446744073709551615, 18446744073709551616, -1]})", "t");
  CHECK(v.find("u")->text == nlohmann::json::parse(R"("\u00e9\u20ac\ud83d\ude00")").get<std::string>());
  std::uint64_t size = 0;
  CHECK(v.find("n")->items[0].as_size(size));
  CHECK(size == 18446744073709551615ull);
  CHECK(!v.find("n")->items[1].as_size(size));  // overflows 64 bits
  CHECK(!v.find("n")->items[2].as_size(size));
  std::string const awkward = "quote \" backslash \\ newline \n tab \t bell \x07 é";
  CHECK(nlohmann::json::parse(io::json::quote(awkward)).get<std::string>() == awkward);
  CHECK(io::json::parse(io::json::quote(awkward), "t").text == awkward);
}

TEST_CASE("weights round-trip bit for bit, in Keras' (In, Out) kernel layout") {
  TempDir dir;
  Model const model = make_model(3);
  save_checkpoint(dir.path / "w.safetensors", model);
  auto const file = io::SafetensorsFile::read(dir.path / "w.safetensors");
  CHECK(file.names() == std::vector<std::string>{"dense_0/kernel", "dense_0/bias", "dense_3/kernel", "dense_3/bias"});
  auto const kernel = file.f32("dense_0/kernel", {784, 24});
  // kernel[i][o] is W(o, i): the weight from input i to unit o.
  Eigen::Map<Matrix const> w(model.parameters().data(), 24, 784);
  CHECK(kernel[5 * 24 + 7] == w(7, 5));
  CHECK(kernel[783 * 24 + 23] == w(23, 783));
  CHECK(file.metadata().at("model") == Model::name());

  Model restored = make_model(99);
  CHECK(weights(restored) != weights(model));
  load_checkpoint(dir.path / "w.safetensors", restored);
  CHECK(weights(restored) == weights(model));
}

TEST_CASE("damaged checkpoints: every kind is an IoError naming the file, and the model is untouched") {
  TempDir dir;
  Model const saved = make_model(3);
  auto const path = dir.path / "c.safetensors";
  save_checkpoint(path, saved);
  std::string const good = slurp(path);
  std::uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= std::uint64_t(static_cast<unsigned char>(good[std::size_t(i)])) << (8 * i);

  auto expect = [&](std::string const& bytes, std::string const& words) {
    CAPTURE(words);
    spill(path, bytes);
    Model model = make_model(5);
    auto const before = weights(model);
    std::string const message = error_of<IoError>([&] { load_checkpoint(path, model); });
    CHECK(message.find(path.string()) != std::string::npos);
    CHECK(message.find(words) != std::string::npos);
    CHECK(weights(model) == before);
  };
  expect("", "the file is 0 bytes");
  expect(good.substr(0, 5), "the file is 5 bytes");
  expect(good.substr(0, 8 + header / 2), "exceeds the");                 // cut in the header
  expect(good.substr(0, 8 + header + 100), "(truncated)");               // cut in the data
  expect(good.substr(0, good.size() - 1), "(truncated)");                // one byte short
  expect(good + "x", "(trailing bytes)");
  std::string flipped = good;
  flipped[good.size() - 1000] = char(flipped[good.size() - 1000] ^ 0x10);  // one bit in the weights
  expect(flipped, "checksum mismatch");
  std::string step = good;  // a metadata value changed: "step":"0" -> "step":"7"
  auto const at = step.find("\"step\":\"0\"");
  REQUIRE(at != std::string::npos);
  step[at + 8] = '7';
  expect(step, "checksum mismatch");
  std::string json = good;
  json[8] = '[';
  expect(json, "the JSON header is malformed at byte");
  std::string huge = good;
  huge[7] = '\x7f';
  expect(huge, "exceeds the");
  std::string dtype = good;
  auto const f32 = dtype.find("\"F32\"");
  dtype.replace(f32, 5, "\"F64\"");
  expect(dtype, "needs");  // an F64 tensor of that shape needs twice the bytes
  spill(dir.path / "foreign.safetensors", std::string(8, '\0').replace(0, 1, "\x08") + "{}      ");
  CHECK(error_of<IoError>([&] { load_checkpoint(dir.path / "foreign.safetensors", *std::make_unique<Model>(1)); })
            .find("not a strata checkpoint") != std::string::npos);
  CHECK(error_of<IoError>([&] { load_checkpoint(dir.path / "missing.safetensors", *std::make_unique<Model>(1)); })
            .find("missing.safetensors: open failed: No such file or directory") != std::string::npos);
}

TEST_CASE("a checkpoint of another model or another shape is refused, naming both") {
  TempDir dir;
  save_checkpoint(dir.path / "other.safetensors", Other(1));
  Model model = make_model(5);
  auto const before = weights(model);
  std::string const message = error_of<ConfigError>([&] { load_checkpoint(dir.path / "other.safetensors", model); });
  CHECK(message.find("the checkpoint holds Sequential<Dense<784, 16>, Relu, Dense<16, 10>>") != std::string::npos);
  CHECK(message.find("the model is Sequential<Dense<784, 24>, Relu, Dropout, Dense<24, 10>>") != std::string::npos);
  CHECK(weights(model) == before);

  // Same model name, a tensor of the wrong shape (a hand-edited file): a ShapeError.
  TrainingState forged = training_state(model);
  std::vector<float> small(24 * 10);
  forged.weights[0].shape = {24, 10};
  forged.weights[0].values = small;
  save_checkpoint(dir.path / "forged.safetensors", forged);
  CHECK(error_of<ShapeError>([&] { load_checkpoint(dir.path / "forged.safetensors", model); })
            .find("tensor 'dense_0/kernel' has shape [24, 10], the model expects [784, 24]") != std::string::npos);
  CHECK(weights(model) == before);
}

TEST_CASE_TEMPLATE("optimizer state round-trips: continuing after a reload is bit-identical", O, Sgd, Adam, AdamW) {
  TempDir dir;
  O const optimizer = [] {
    if constexpr (std::is_same_v<O, Sgd>) return Sgd{.lr = 0.05f, .momentum = 0.9f, .nesterov = true};
    else return O{};
  }();
  Model a = make_model(1);
  auto state = optimizer.make_state(Model::arena_size);
  std::vector<float> g(Model::arena_size);  // zero in the arena's padding, as real gradients are
  auto step = [&](Model& m, auto& s, std::int64_t t) {
    for (auto const& tensor : Model::parameter_tensors())
      for (std::size_t i = tensor.offset; i < tensor.offset + nn::element_count(tensor.shape); ++i)
        g[i] = float(std::sin(double(i) * 0.37 + double(t)));
    optimizer.update(m.parameters(), g, s, 0, t);
  };
  for (int t = 1; t <= 3; ++t) step(a, state, t);
  save_checkpoint(dir.path / "o.safetensors", a, optimizer, state, Progress{.step = 3});

  Model b = make_model(2);
  auto restored = optimizer.make_state(Model::arena_size);
  Progress const p = load_checkpoint(dir.path / "o.safetensors", b, optimizer, restored);
  CHECK(p.step == 3);
  for (int t = 4; t <= 6; ++t) {
    step(a, state, t);
    step(b, restored, t);
  }
  CHECK(weights(a) == weights(b));
  // Without the moments the continuation differs: the test can fail.
  Model c = make_model(2);
  load_checkpoint(dir.path / "o.safetensors", c);
  auto fresh = optimizer.make_state(Model::arena_size);
  for (int t = 4; t <= 6; ++t) step(c, fresh, t);
  CHECK(weights(c) != weights(a));
}

TEST_CASE("an optimizer state the checkpoint lacks is a ConfigError naming both optimizers") {
  TempDir dir;
  Model m = make_model(1);
  Adam const adam{};
  auto adam_state = adam.make_state(Model::arena_size);
  save_checkpoint(dir.path / "adam.safetensors", m, adam, adam_state);
  Sgd const sgd{.momentum = 0.9f};
  auto sgd_state = sgd.make_state(Model::arena_size);
  CHECK(error_of<ConfigError>([&] { (void)load_checkpoint(dir.path / "adam.safetensors", m, sgd, sgd_state); })
            .find("it holds the state of optimizer 'Adam', the run uses Sgd") != std::string::npos);
  save_checkpoint(dir.path / "weights.safetensors", m);
  CHECK(error_of<ConfigError>([&] { (void)load_checkpoint(dir.path / "weights.safetensors", m, adam, adam_state); })
            .find("none (weights only)") != std::string::npos);
}

TEST_CASE("CheckpointManager keeps the newest max_to_keep and falls back past a damaged newest file") {
  TempDir dir;
  Model m = make_model(1);
  TrainingState state = training_state(m);
  {
    spill(dir.path / ".ckpt-9.safetensors.tmp-123-0", "left by a killed writer");
    CheckpointManager manager(dir.path, 2);
    CHECK(!std::filesystem::exists(dir.path / ".ckpt-9.safetensors.tmp-123-0"));
    CHECK(!manager.latest());
    CHECK(!manager.restore(state));
    for (std::int64_t step : {10, 20, 30}) {
      state.progress.step = step;
      m.parameters()[0] = float(step);
      manager.save(state);
    }
    CHECK(manager.checkpoints() == std::vector<std::filesystem::path>{dir.path / "ckpt-20.safetensors",
                                                                     dir.path / "ckpt-30.safetensors"});
    CHECK(*manager.latest() == dir.path / "ckpt-30.safetensors");
    for (auto const& entry : std::filesystem::directory_iterator(dir.path))  // no temporary left behind
      CHECK(!io::is_abandoned_temporary(entry.path()));

    std::string bytes = slurp(dir.path / "ckpt-30.safetensors");
    spill(dir.path / "ckpt-30.safetensors", bytes.substr(0, bytes.size() / 2));
    m.parameters()[0] = -1.0f;
    auto const report = manager.restore(state);
    REQUIRE(report);
    CHECK(report->path == dir.path / "ckpt-20.safetensors");
    REQUIRE(report->skipped.size() == 1);
    CHECK(report->skipped[0].second.find("(truncated)") != std::string::npos);
    CHECK(m.parameters()[0] == 20.0f);
    CHECK(state.progress.step == 20);

    spill(dir.path / "ckpt-20.safetensors", "garbage");
    CHECK(error_of<IoError>([&] { (void)manager.restore(state); }).find("no checkpoint could be read") != std::string::npos);
    manager.clear();
    CHECK(manager.checkpoints().empty());
  }
  CHECK(error_of<ConfigError>([&] { CheckpointManager(dir.path, 0); }).find("max_to_keep 0 must be >= 1") != std::string::npos);
}

TEST_CASE("a write that fails part-way (file size limit) leaves the old checkpoint intact and no temporary") {
  TempDir dir;
  auto const path = dir.path / "c.safetensors";
  save_checkpoint(path, make_model(1));
  std::string const before = slurp(path);
  pid_t const child = fork();
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit const limit{64 * 1024, 64 * 1024};  // the model is ~75 KB
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      save_checkpoint(path, make_model(2));
    } catch (IoError const& e) {
      _exit(std::string(e.what()).find("write failed: File too large") != std::string::npos ? 42 : 1);
    }
    _exit(2);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 42);
  CHECK(slurp(path) == before);
  for (auto const& entry : std::filesystem::directory_iterator(dir.path)) CHECK(!io::is_abandoned_temporary(entry.path()));
  CHECK(error_of<IoError>([&] { save_checkpoint(dir.path / "no/such/dir/c.safetensors", make_model(1)); })
            .find("create failed: No such file or directory") != std::string::npos);
}

TEST_CASE("a checkpoint written by Mirrored<4> loads into OneDevice and Mirrored<2>, and they continue alike") {
  TempDir dir;
  FitOptions const options{.epochs = 2, .batch_size = 40, .seed = 3};
  Model four = make_model(1);
  ModelCheckpoint checkpoint{.directory = dir.path / "m4", .max_to_keep = 1};
  Trainer<Mirrored<4>>().fit(four, Adam{}, SoftmaxCrossEntropy{}, fashion(), {.epochs = 1, .batch_size = 40, .seed = 3},
                             checkpoint);
  REQUIRE(checkpoint.last_saved);
  auto const file = io::SafetensorsFile::read(*checkpoint.last_saved);
  CHECK(file.metadata().at("config") == "Mirrored<4>, Cpu, FullPrecision, GradAccum<1>, BucketBytes<26214400>, NoCompression");
  CHECK(file.metadata().at("epoch") == "1");
  CHECK(file.names().size() == 4 + 8);  // weights once, plus m and v: nothing per replica

  // Resume the same run (epoch 2 of 2) on three strategies from the Mirrored<4> checkpoint.
  auto resume = [&]<class T>(T trainer, std::string const& name) {
    std::filesystem::copy_file(*checkpoint.last_saved, dir.path / name / "backup-10.safetensors",
                               (std::filesystem::create_directories(dir.path / name),
                                std::filesystem::copy_options::overwrite_existing));
    Model m = make_model(77);
    BackupAndRestore backup{.directory = dir.path / name};
    History const h = trainer.fit(m, Adam{}, SoftmaxCrossEntropy{}, fashion(), options, backup);
    CHECK(backup.restored);
    CHECK(h.epochs() == 2);
    return weights(m);
  };
  auto const on_four = resume(Trainer<Mirrored<4>>{}, "a");
  auto const on_one = resume(Trainer<OneDevice>{}, "b");
  auto const on_two = resume(Trainer<Mirrored<2>>{}, "c");
  Model straight = make_model(1);
  Trainer<Mirrored<4>>().fit(straight, Adam{}, SoftmaxCrossEntropy{}, fashion(), options);
  CHECK(on_four == weights(straight));  // same strategy: bit for bit
  auto close = [](std::vector<float> const& x, std::vector<float> const& y) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < x.size(); ++i) num += (x[i] - y[i]) * double(x[i] - y[i]), den += double(y[i]) * y[i];
    return std::sqrt(num / den);
  };
  CHECK(close(on_one, on_four) < 1e-5);  // other reduction orders: fp32 rounding only
  CHECK(close(on_two, on_four) < 1e-5);
}

TEST_CASE_TEMPLATE("BackupAndRestore: a crashed fit resumes bit for bit, history included", T, Trainer<OneDevice>,
                   Trainer<Mirrored<2>, GradAccum<2>>, Trainer<Mirrored<3>>) {
  TempDir dir;
  FitOptions const options{.epochs = 3, .batch_size = 30, .validation = fashion().take(60), .seed = 11};
  Model straight = make_model(1);
  History const reference = T().fit(straight, Adam{}, SoftmaxCrossEntropy{}, fashion(), options);

  for (std::int64_t crash_step : {std::int64_t(4), std::int64_t(T::config::accumulation_steps == 2 ? 7 : 14), std::int64_t(20)}) {
    CAPTURE(crash_step);
    BackupAndRestore backup{.directory = dir.path / "backup", .every_steps = 3};
    Model first = make_model(1);
    CHECK_THROWS_WITH(T().fit(first, Adam{}, SoftmaxCrossEntropy{}, fashion(), options, backup, CrashAt{crash_step}),
                      "simulated crash");
    Model second = make_model(2);  // a new process would start from different weights
    History const resumed = T().fit(second, Adam{}, SoftmaxCrossEntropy{}, fashion(), options, backup);
    REQUIRE(backup.restored);
    CHECK(weights(second) == weights(straight));
    CHECK(resumed["loss"] == reference["loss"]);
    CHECK(resumed["val_accuracy"] == reference["val_accuracy"]);
    CHECK(CheckpointManager(dir.path / "backup").checkpoints().empty());  // deleted after success
  }
}

// 400 samples at a batch of 30: passes of 14 batches; epochs of 5 steps begin and end inside
// them. Validation after every second epoch; EarlyStopping's replay must place those values
// at epochs 1, 3, 5, not 0, 1, 2 (monitored with "max" as the better direction, so that the
// best is an early epoch, one the replay places).
TEST_CASE_TEMPLATE("BackupAndRestore with steps_per_epoch and validation_freq: a crashed fit resumes bit for bit", T,
                   Trainer<OneDevice>, Trainer<Mirrored<2>>) {
  TempDir dir;
  FitOptions const options{.epochs = 6, .batch_size = 30, .validation = fashion().take(60), .seed = 11,
                           .steps_per_epoch = 5, .validation_freq = 2};
  Model straight = make_model(1);
  auto const early = [] { return EarlyStopping{.monitor = "val_loss", .patience = 10, .mode = EarlyStopping::Mode::max}; };
  EarlyStopping reference = early();
  History const h = T().fit(straight, Adam{}, SoftmaxCrossEntropy{}, fashion(), options, reference);
  REQUIRE(h["val_loss"].size() == 3);
  REQUIRE(reference.best_epoch == 1);
  for (std::int64_t crash_step : {4, 13, 23}) {  // inside epochs 0, 2 (pass 0) and 4 (pass 1)
    CAPTURE(crash_step);
    BackupAndRestore backup{.directory = dir.path / "backup", .every_steps = 3};
    EarlyStopping first = early();
    Model m = make_model(1);
    CHECK_THROWS_WITH(T().fit(m, Adam{}, SoftmaxCrossEntropy{}, fashion(), options, backup, first, CrashAt{crash_step}),
                      "simulated crash");
    EarlyStopping resumed = early();
    Model again = make_model(2);
    History const r = T().fit(again, Adam{}, SoftmaxCrossEntropy{}, fashion(), options, backup, resumed);
    REQUIRE(backup.restored);
    CHECK(weights(again) == weights(straight));
    CHECK(r["loss"] == h["loss"]);
    CHECK(r["val_loss"] == h["val_loss"]);
    CHECK(resumed.best_epoch == reference.best_epoch);
  }
}

TEST_CASE("ModelCheckpoint(save_best_only) after a resume keeps the best of the whole history") {
  TempDir dir;
  FitOptions const options{.epochs = 4, .batch_size = 40, .validation = fashion().take(50), .seed = 2};
  BackupAndRestore backup{.directory = dir.path / "backup"};
  ModelCheckpoint best{.directory = dir.path / "best", .save_best_only = true, .save_weights_only = true};
  Model m = make_model(1);
  CHECK_THROWS(Trainer<>().fit(m, Adam{.lr = 0.02f}, SoftmaxCrossEntropy{}, fashion(), options, backup, best, CrashAt{35}));
  int const saves_before = best.saves;
  History const h = Trainer<>().fit(m, Adam{.lr = 0.02f}, SoftmaxCrossEntropy{}, fashion(), options, backup, best);
  double lowest = 1e300;
  for (double v : h["val_loss"]) lowest = std::min(lowest, v);
  CHECK(h.epochs() == 4);
  CHECK(best.best == lowest);
  CAPTURE(saves_before);
  auto const saved = io::SafetensorsFile::read(*best.last_saved);
  CHECK(saved.metadata().at("step") != "0");  // named and stamped with the step it was taken at
}

TEST_CASE("EarlyStopping after a resume replays the history and stops after the same epoch") {
  TempDir dir;
  // Seed 3 stops in epoch 8 (most seeds run all 12 epochs without a stop at this patience).
  FitOptions const options{.epochs = 12, .batch_size = 40, .validation = fashion().take(60), .seed = 3};
  Adam const fast{.lr = 0.01f};
  Model straight = make_model(1);
  EarlyStopping reference{.monitor = "val_loss", .patience = 1};
  History const h = Trainer<>().fit(straight, fast, SoftmaxCrossEntropy{}, fashion(), options, reference);
  REQUIRE(reference.stopped_epoch >= 2);  // the test needs an epoch to crash in before the stop
  CAPTURE(reference.stopped_epoch);

  BackupAndRestore backup{.directory = dir.path};
  EarlyStopping first{.monitor = "val_loss", .patience = 1};
  std::int64_t const crash_step = 10 * reference.stopped_epoch + 5;  // 10 steps per epoch: inside the stopping epoch
  Model m = make_model(1);
  CHECK_THROWS(Trainer<>().fit(m, fast, SoftmaxCrossEntropy{}, fashion(), options, backup, first, CrashAt{crash_step}));
  EarlyStopping resumed{.monitor = "val_loss", .patience = 1};
  Model again = make_model(2);
  History const r = Trainer<>().fit(again, fast, SoftmaxCrossEntropy{}, fashion(), options, backup, resumed);
  REQUIRE(backup.restored);
  CHECK(resumed.stopped_epoch == reference.stopped_epoch);
  CHECK(resumed.best == reference.best);
  CHECK(r["val_loss"] == h["val_loss"]);
  CHECK(weights(again) == weights(straight));
}

TEST_CASE("EarlyStopping restore_best_weights after a resume: the backup carries the best epoch's weights") {
  // The training loss with "max" as the better direction: it falls every epoch, so epoch 0 is the best.
  FitOptions const options{.epochs = 3, .batch_size = 40, .seed = 3};
  auto early = [] {
    return EarlyStopping{.monitor = "loss", .patience = 10, .mode = EarlyStopping::Mode::max, .restore_best_weights = true};
  };
  Model straight = make_model(1);
  EarlyStopping reference = early();
  History const h = Trainer<>().fit(straight, Sgd{}, SoftmaxCrossEntropy{}, fashion(), options, reference);
  REQUIRE(h["loss"][1] < h["loss"][0]);
  REQUIRE(h["loss"][2] < h["loss"][1]);
  REQUIRE(reference.restored_epoch == 0);
  Model unrestored = make_model(1);  // the same run's last weights
  Trainer<>().fit(unrestored, Sgd{}, SoftmaxCrossEntropy{}, fashion(), options);
  REQUIRE(weights(unrestored) != weights(straight));  // so that restoring shows

  for (int crash_epoch : {1, 2}) {  // 10 steps per epoch: the backup holds the end of epoch crash_epoch - 1
    CAPTURE(crash_epoch);
    TempDir dir;
    BackupAndRestore backup{.directory = dir.path};
    EarlyStopping first = early();
    Model m = make_model(1);
    CHECK_THROWS(Trainer<>().fit(m, Sgd{}, SoftmaxCrossEntropy{}, fashion(), options, backup, first,
                                 CrashAt{10 * crash_epoch + 5}));
    EarlyStopping resumed = early();
    Model again = make_model(2);
    Trainer<>().fit(again, Sgd{}, SoftmaxCrossEntropy{}, fashion(), options, backup, resumed);
    REQUIRE(backup.restored);
    CHECK(resumed.best_epoch == 0);
    // crash_epoch 1: the backup was written at the end of the best epoch, before the callback
    // kept its weights: they are the restored weights. 2: the backup carries them.
    CHECK(resumed.restored_epoch == 0);
    CHECK(weights(again) == weights(straight));
  }
  // A backup carries them as one tensor named by the epoch; a ModelCheckpoint of the same run does not.
  TempDir dir;
  BackupAndRestore backup{.directory = dir.path / "backup", .delete_on_success = false};
  ModelCheckpoint checkpoint{.directory = dir.path / "ckpt"};
  EarlyStopping keeping = early();
  Model m = make_model(1);
  Trainer<>().fit(m, Sgd{}, SoftmaxCrossEntropy{}, fashion(), options, backup, keeping, checkpoint);
  REQUIRE(checkpoint.last_saved);
  auto const names = [](std::filesystem::path const& p) { return io::SafetensorsFile::read(p).names(); };
  auto const kept_in_backup = [&] {
    for (auto const& entry : std::filesystem::directory_iterator(dir.path / "backup"))
      if (entry.path().extension() == ".safetensors")
        for (std::string const& name : names(entry.path()))
          if (name == "kept/early_stopping/loss/epoch_0") return true;
    return false;
  };
  CHECK(kept_in_backup());
  for (std::string const& name : names(*checkpoint.last_saved)) CHECK_FALSE(name.starts_with("kept/"));
}

TEST_CASE("BackupAndRestore refuses a backup of a run with other FitOptions, and changes nothing") {
  TempDir dir;
  BackupAndRestore backup{.directory = dir.path, .every_steps = 2, .delete_on_success = false};
  Model m = make_model(1);
  Trainer<>().fit(m, Sgd{}, SoftmaxCrossEntropy{}, fashion(), {.epochs = 1, .batch_size = 50, .seed = 1}, backup);
  Model other = make_model(4);
  auto const before = weights(other);
  std::string const message = error_of<ConfigError>([&] {
    Trainer<>().fit(other, Sgd{}, SoftmaxCrossEntropy{}, fashion(), {.epochs = 2, .batch_size = 40, .seed = 1}, backup);
  });
  CHECK(message.find("seed 1, batch_size 50 and steps_per_epoch 0; this run has seed 1, batch_size 40 and steps_per_epoch 0") != std::string::npos);
  // Epochs of other lengths would place the saved (epoch, batch) elsewhere in the data.
  std::string const steps = error_of<ConfigError>([&] {
    Trainer<>().fit(other, Sgd{}, SoftmaxCrossEntropy{}, fashion(),
                    {.epochs = 2, .batch_size = 50, .seed = 1, .steps_per_epoch = 3}, backup);
  });
  CHECK(steps.find("steps_per_epoch 0; this run has seed 1, batch_size 50 and steps_per_epoch 3") != std::string::npos);
  CHECK(weights(other) == before);
}

TEST_CASE("ModelCheckpoint: every N steps, or the best epochs only") {
  TempDir dir;
  Model m = make_model(1);
  ModelCheckpoint steps{.directory = dir.path / "steps", .every_steps = 4, .max_to_keep = 100};
  Trainer<>().fit(m, Sgd{}, SoftmaxCrossEntropy{}, fashion(), {.epochs = 2, .batch_size = 40, .seed = 1}, steps);
  CHECK(steps.saves == 5);  // steps 4, 8, ..., 20 of 20
  CHECK(CheckpointManager(dir.path / "steps").checkpoints().size() == 5);

  ModelCheckpoint best{.directory = dir.path / "best", .save_best_only = true, .monitor = "val_loss",
                       .save_weights_only = true, .max_to_keep = 100};
  History const h = Trainer<>().fit(m, Adam{.lr = 0.02f}, SoftmaxCrossEntropy{}, fashion(),
                                    {.epochs = 6, .batch_size = 40, .validation = fashion().take(50), .seed = 1}, best);
  int improvements = 0;
  double lowest = 1e300;
  for (double v : h["val_loss"])
    if (v < lowest) lowest = v, ++improvements;
  CHECK(best.saves == improvements);
  CHECK(best.best == lowest);
  auto const last = io::SafetensorsFile::read(*best.last_saved);
  CHECK(last.names().size() == 4);  // weights only
  CHECK(error_of<ConfigError>([&] {
          Trainer<>().fit(m, Sgd{}, SoftmaxCrossEntropy{}, fashion(), {.batch_size = 40},
                          ModelCheckpoint{.directory = dir.path, .every_steps = 2, .save_best_only = true});
        }).find("save_best_only compares epoch metrics") != std::string::npos);
}

namespace {
// Copies the next of `staged` into the watched directory each time the evaluator reports a
// checkpoint: the evaluator then meets every checkpoint in turn, as if training wrote them.
struct Feeder {
  std::vector<std::filesystem::path> staged;
  std::filesystem::path watched;
  std::size_t next = 1;
  void on_checkpoint_evaluated(CheckpointEvaluation const&) {
    if (next == staged.size()) return;
    std::filesystem::copy_file(staged[next], watched / staged[next].filename());
    ++next;
  }
};

SidecarEvaluator quick(std::filesystem::path checkpoint) {
  return {.checkpoint = std::move(checkpoint), .batch_size = 40, .poll = std::chrono::milliseconds(5),
          .idle_timeout = std::chrono::milliseconds(300)};
}
}  // namespace

TEST_CASE("SidecarEvaluator: each checkpoint's evaluation equals fit's own validation of that epoch") {
  TempDir dir;
  Model trained = make_model(3);
  Dataset const test = fashion().take(120);
  ModelCheckpoint every_epoch{.directory = dir.path / "written", .max_to_keep = 100};
  History const h = Trainer<>().fit(trained, Adam{.lr = 0.01f}, SoftmaxCrossEntropy{}, fashion(),
                                    {.epochs = 4, .batch_size = 40, .validation = test, .seed = 5}, every_epoch);
  auto const written = CheckpointManager(dir.path / "written").checkpoints();
  REQUIRE(written.size() == 4);
  std::filesystem::create_directories(dir.path / "watched");
  std::filesystem::copy_file(written[0], dir.path / "watched" / written[0].filename());

  Model evaluated = make_model(99);  // other initial weights: every evaluation reads its file
  Trainer<> trainer;
  SidecarEvaluator sidecar = quick(dir.path / "watched");
  sidecar.until_epochs = 4;
  SidecarReport const report = sidecar.run(trainer, evaluated, SoftmaxCrossEntropy{}, test,
                                           Feeder{written, dir.path / "watched"});
  CHECK(report.stopped_by == SidecarStop::until_epochs);
  CHECK(report.skipped.empty());
  REQUIRE(report.evaluations.size() == 4);
  for (std::size_t e = 0; e < 4; ++e) {
    CheckpointEvaluation const& got = report.evaluations[e];
    CHECK(got.step == 10 * std::int64_t(e + 1));  // 400 samples in batches of 40
    CHECK(got.epoch == std::int64_t(e + 1));
    CHECK(got.batch == 0);
    CHECK(got.path == (dir.path / "watched" / written[e].filename()).string());
    CHECK(got.evaluation.samples == 120);
    CHECK(got.evaluation.loss == h["val_loss"][e]);
    CHECK(got.evaluation.accuracy == h["val_accuracy"][e]);
  }
  CHECK(weights(evaluated) == weights(trained));

  // Started after training, it evaluates only the newest, as Keras' does.
  SidecarEvaluator latest = quick(dir.path / "written");
  latest.until_step = 40;
  SidecarReport const once = latest.run(trainer, evaluated, SoftmaxCrossEntropy{}, test);
  CHECK(once.stopped_by == SidecarStop::until_step);
  REQUIRE(once.evaluations.size() == 1);
  CHECK(once.evaluations[0].step == 40);

  // With no stop condition met it waits for idle_timeout, evaluating nothing twice.
  SidecarEvaluator idle = quick(dir.path / "written");
  SidecarReport const waited = idle.run(trainer, evaluated, SoftmaxCrossEntropy{}, test);
  CHECK(waited.stopped_by == SidecarStop::idle_timeout);
  CHECK(waited.evaluations.size() == 1);
  idle.max_evaluations = 1;
  CHECK(idle.run(trainer, evaluated, SoftmaxCrossEntropy{}, test).stopped_by == SidecarStop::max_evaluations);

  // A function may be a callback too; returning true stops the evaluator after that one.
  std::filesystem::create_directories(dir.path / "again");
  std::filesystem::copy_file(written[0], dir.path / "again" / written[0].filename());
  std::vector<std::int64_t> steps;
  SidecarReport const stopped = quick(dir.path / "again")
                                    .run(trainer, evaluated, SoftmaxCrossEntropy{}, test,
                                         Feeder{written, dir.path / "again"}, [&](CheckpointEvaluation const& e) {
                                           steps.push_back(e.step);
                                           return e.epoch == 2;
                                         });
  CHECK(stopped.stopped_by == SidecarStop::callback);
  CHECK(steps == std::vector<std::int64_t>{10, 20});
}

TEST_CASE("SidecarEvaluator beside a running fit: whatever it evaluates is that epoch's validation") {
  TempDir dir;
  Model trained = make_model(4);
  Dataset const test = fashion().take(120);
  History history;
  // max_to_keep 1: every save removes the file before, so the evaluator meets files that
  // vanish between its listing and its read.
  std::thread training([&] {
    history = Trainer<>().fit(trained, Sgd{.lr = 0.05f, .momentum = 0.9f}, SoftmaxCrossEntropy{}, fashion(),
                              {.epochs = 6, .batch_size = 40, .validation = test, .seed = 6},
                              ModelCheckpoint{.directory = dir.path, .max_to_keep = 1});
  });
  Model evaluated = make_model(98);
  Trainer<> trainer;
  SidecarEvaluator sidecar{.checkpoint = dir.path, .batch_size = 40, .until_epochs = 6,
                           .poll = std::chrono::milliseconds(1), .idle_timeout = std::chrono::seconds(120)};
  SidecarReport const report = sidecar.run(trainer, evaluated, SoftmaxCrossEntropy{}, test);
  training.join();
  CHECK(report.stopped_by == SidecarStop::until_epochs);
  CHECK(report.skipped.empty());
  REQUIRE(!report.evaluations.empty());
  std::int64_t previous = 0;
  for (CheckpointEvaluation const& got : report.evaluations) {
    CHECK(got.step > previous);
    previous = got.step;
    REQUIRE(got.epoch >= 1);
    REQUIRE(got.epoch <= 6);
    CHECK(got.step == 10 * got.epoch);
    CHECK(got.evaluation.loss == history["val_loss"][std::size_t(got.epoch - 1)]);
    CHECK(got.evaluation.accuracy == history["val_accuracy"][std::size_t(got.epoch - 1)]);
  }
  CHECK(report.evaluations.back().epoch == 6);
  CHECK(weights(evaluated) == weights(trained));
}

TEST_CASE("SidecarEvaluator: a damaged file is reported and passed over, another model is an error, bad options name the value") {
  TempDir dir;
  Model trained = make_model(5);
  Dataset const test = fashion().take(80);
  ModelCheckpoint every_epoch{.directory = dir.path, .max_to_keep = 100};
  Trainer<> trainer;
  trainer.fit(trained, Sgd{}, SoftmaxCrossEntropy{}, fashion(), {.epochs = 2, .batch_size = 40, .seed = 5}, every_epoch);
  // A newer file with one flipped bit in its weights: the evaluator reports it and takes
  // the newest readable one instead.
  std::string bytes = slurp(dir.path / "ckpt-20.safetensors");
  bytes[bytes.size() - 5] ^= 0x10;
  spill(dir.path / "ckpt-21.safetensors", bytes);
  Model evaluated = make_model(97);
  SidecarReport const report = quick(dir.path).run(trainer, evaluated, SoftmaxCrossEntropy{}, test);
  REQUIRE(report.skipped.size() == 1);
  CHECK(report.skipped[0].first == dir.path / "ckpt-21.safetensors");
  CHECK(report.skipped[0].second.find("checksum mismatch") != std::string::npos);
  REQUIRE(report.evaluations.size() == 1);
  CHECK(report.evaluations[0].step == 20);
  CHECK(report.evaluations[0].evaluation.loss == trainer.evaluate(trained, SoftmaxCrossEntropy{}, test, 40).loss);

  // Only damaged files: nothing evaluated, and the model is as it was.
  std::filesystem::create_directories(dir.path / "damaged");
  spill(dir.path / "damaged" / "ckpt-7.safetensors", bytes);
  Model untouched = make_model(96);
  std::vector<float> const before = weights(untouched);
  SidecarReport const none = quick(dir.path / "damaged").run(trainer, untouched, SoftmaxCrossEntropy{}, test);
  CHECK(none.evaluations.empty());
  CHECK(none.skipped.size() == 1);
  CHECK(none.stopped_by == SidecarStop::idle_timeout);
  CHECK(weights(untouched) == before);

  // A checkpoint of another model: thrown at once, naming both.
  std::filesystem::create_directories(dir.path / "other");
  save_checkpoint(dir.path / "other" / "ckpt-3.safetensors", Other(1));
  std::string const other = error_of<ConfigError>(
      [&] { (void)quick(dir.path / "other").run(trainer, untouched, SoftmaxCrossEntropy{}, test); });
  CHECK(other.find("ckpt-3.safetensors: the checkpoint holds Sequential<Dense<784, 16>") != std::string::npos);
  CHECK(weights(untouched) == before);

  auto refused = [&](SidecarEvaluator const& s) {
    return error_of<ConfigError>([&] { (void)s.run(trainer, untouched, SoftmaxCrossEntropy{}, test); });
  };
  CHECK(refused({}).find("SidecarEvaluator: no checkpoint to watch") != std::string::npos);
  CHECK(refused({.checkpoint = dir.path, .batch_size = 0}).find("batch_size 0 must be >= 1") != std::string::npos);
  CHECK(refused({.checkpoint = dir.path, .prefix = "a/b"}).find("prefix 'a/b'") != std::string::npos);
  CHECK(refused({.checkpoint = dir.path, .max_evaluations = -2}).find("max_evaluations -2") != std::string::npos);
  CHECK(refused({.checkpoint = dir.path, .until_epochs = -1}).find("until_epochs -1 must be >= 0") != std::string::npos);
  CHECK(refused({.checkpoint = dir.path, .poll = std::chrono::milliseconds(0)}).find("poll 0 ms must be > 0") !=
        std::string::npos);
}

namespace {
// Counts the evaluator's reports, for a test thread that waits for them.
struct Seen {
  std::atomic<int>* count;
  void on_checkpoint_evaluated(CheckpointEvaluation const&) { count->fetch_add(1); }
};
}  // namespace

TEST_CASE("SidecarEvaluator on one file replaced in place, and a stop request ends its wait") {
  TempDir dir;
  Dataset const test = fashion().take(80);
  std::filesystem::path const file = dir.path / "job" / "model.safetensors";  // not there yet
  std::atomic<int> seen{0};
  SidecarReport report;
  std::jthread sidecar([&](std::stop_token stop) {
    Trainer<> trainer;
    Model evaluated = make_model(95);
    SidecarEvaluator watcher{.checkpoint = file, .batch_size = 40, .poll = std::chrono::milliseconds(2), .stop = stop};
    report = watcher.run(trainer, evaluated, SoftmaxCrossEntropy{}, test, Seen{&seen});
  });
  std::filesystem::create_directories(file.parent_path());
  std::vector<double> expected;
  auto write = [&](std::int64_t step, std::uint64_t seed) {
    Model const written = make_model(seed);
    TrainingState state = training_state(const_cast<Model&>(written));
    state.progress.step = step;
    save_checkpoint(file, state);  // replaces the file: a new inode
    return Trainer<>().evaluate(written, SoftmaxCrossEntropy{}, test, 40).loss;
  };
  auto wait_for = [&](int n) {
    for (int waited = 0; waited < 60000 && seen.load() < n; ++waited)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(seen.load() == n);
  };
  expected.push_back(write(1, 11));
  wait_for(1);
  write(1, 11);  // the same step again: the same weights, not evaluated twice
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  expected.push_back(write(2, 12));
  wait_for(2);
  sidecar.request_stop();  // no stop condition and no idle_timeout: only this ends it
  sidecar.join();
  CHECK(report.stopped_by == SidecarStop::stop_requested);
  REQUIRE(report.evaluations.size() == 2);
  CHECK(report.evaluations[0].step == 1);
  CHECK(report.evaluations[1].step == 2);
  CHECK(report.evaluations[0].evaluation.loss == expected[0]);
  CHECK(report.evaluations[1].evaluation.loss == expected[1]);
  CHECK(expected[0] != expected[1]);
}

#ifdef STRATA_CHECKPOINT_WORKER
namespace {
struct Outcome {
  bool killed = false;  // ended by SIGKILL
  int exit_code = -1;
};

// Runs the worker; kills it after `kill_after` (if given) unless it has finished by then.
Outcome run_worker(std::filesystem::path const& dir, std::filesystem::path const& result,
                   std::vector<std::string> extra = {}, std::optional<std::chrono::milliseconds> kill_after = {}) {
  std::vector<std::string> args{STRATA_CHECKPOINT_WORKER, dir.string(), result.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_t const child = fork();
  if (child == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  if (kill_after) {
    auto const deadline = std::chrono::steady_clock::now() + *kill_after;
    while (waitpid(child, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } else {
    waitpid(child, &status, 0);
  }
  return {WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

bool has_abandoned_temporary(std::filesystem::path const& dir) {
  for (auto const& entry : std::filesystem::directory_iterator(dir))
    if (io::is_abandoned_temporary(entry.path())) return true;
  return false;
}
}  // namespace

TEST_CASE("SIGKILL at any moment, even mid-save: the restarted run ends bit-identical to an uninterrupted one") {
  TempDir dir;
  auto const started = std::chrono::steady_clock::now();
  REQUIRE(run_worker(dir.path / "reference", dir.path / "reference.bin").exit_code == 0);
  auto const run_ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
  std::string const reference = slurp(dir.path / "reference.bin");
  REQUIRE(reference.size() > 4 * 50000);

  auto resume_and_compare = [&](std::filesystem::path const& backup) {
    REQUIRE(run_worker(backup, dir.path / "resumed.bin").exit_code == 0);
    CHECK(slurp(dir.path / "resumed.bin") == reference);
  };
  // Killed before step N's backup (N = 1, mid-epoch, the last step of epoch 1, in epoch 3).
  for (int step : {1, 13, 24, 50}) {
    CAPTURE(step);
    auto const backup = dir.path / ("step-" + std::to_string(step));
    REQUIRE(run_worker(backup, dir.path / "killed.bin", {"--kill-at-step", std::to_string(step)}).killed);
    resume_and_compare(backup);
  }
  // Killed while writing the K-th backup: its temporary file is left, the previous backup is used.
  for (int k : {1, 5, 30}) {
    CAPTURE(k);
    auto const backup = dir.path / ("save-" + std::to_string(k));
    REQUIRE(run_worker(backup, dir.path / "killed.bin", {"--kill-during-save", std::to_string(k)}).killed);
    CHECK(has_abandoned_temporary(backup));
    resume_and_compare(backup);
  }
  // Killed from outside at random moments, several times in a row, then left to finish.
  auto const backup = dir.path / "random";
  std::mt19937 rng(2026);
  int kills = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto const delay = std::chrono::milliseconds(std::uniform_int_distribution<int>(run_ms / 10, run_ms * 9 / 10)(rng));
    kills += run_worker(backup, dir.path / "killed.bin", {}, delay).killed;
  }
  MESSAGE("an uninterrupted run takes " << run_ms << " ms; random-time kills that landed: " << kills << " of 4");
  resume_and_compare(backup);
}
#endif
