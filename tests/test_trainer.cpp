// Trainer: Mirrored<N> against the single-replica oracle, determinism, accumulation,
// callbacks, evaluation and every bad input of fit.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "rounded_sum_sync.hpp"
#include "strata.hpp"
#include "temp_dir.hpp"
#include "weights_after_each_epoch.hpp"

using namespace strata;

namespace {
using Model = Sequential<Dense<784, 32>, Relu, Dropout, Dense<32, 10>>;
using PlainModel = Sequential<Dense<784, 32>, Relu, Dense<32, 10>>;

Dataset const& fashion() {
  static Dataset const data = data::fashion_mnist(data::Split::train).take(610);
  return data;
}

template <class T, class M = Model, class O = Sgd>
std::vector<float> train_weights(int batch_size, O optimizer = Sgd{.lr = 0.05f, .momentum = 0.9f}, int epochs = 1,
                                 std::size_t samples = 610) {
  M model = [] {
    if constexpr (std::is_same_v<M, Model>) return M(42, {}, {}, Dropout{0.2f}, {});
    else return M(42);
  }();
  T trainer;
  trainer.fit(model, optimizer, SoftmaxCrossEntropy{}, fashion().take(samples),
              {.epochs = epochs, .batch_size = batch_size, .seed = 5});
  return {model.parameters().begin(), model.parameters().end()};
}

double relative_difference(std::vector<float> const& a, std::vector<float> const& b) {
  Eigen::Map<Vector const> x(a.data(), Eigen::Index(a.size())), y(b.data(), Eigen::Index(b.size()));
  return double((x - y).norm() / y.norm());
}
}  // namespace

// 610 samples at a global batch of 30: 20 full batches and a last one of 10, which 3 and 4
// replicas cannot split evenly; dropout masks must not depend on the split either.
TEST_CASE_TEMPLATE("Mirrored<N> matches OneDevice on the same global batches (21 steps)", T, Trainer<Mirrored<2>>,
                   Trainer<Mirrored<3>>, Trainer<Mirrored<4>>) {
  auto const reference = train_weights<Trainer<OneDevice>>(30);
  Model const untrained(42);
  auto const initial = untrained.parameters();
  CHECK(relative_difference(reference, {initial.begin(), initial.end()}) > 1e-2);  // training moved the weights
  CHECK(relative_difference(train_weights<T>(30), reference) < 1e-5);
  CHECK(relative_difference(train_weights<T>(30, Adam{.lr = 1e-3f}), train_weights<Trainer<OneDevice>>(30, Adam{.lr = 1e-3f})) < 1e-5);
}

// A convolutional model (nn/conv.hpp): replicas that gather their own shards' patches train
// what one replica trains on the whole batches; so do intra-op threads splitting its products
// and its gathers; and the same run twice gives the same bits.
TEST_CASE("a convolutional model trains on Mirrored<2> and Mirrored<3> what it trains on OneDevice") {
  using Cnn = Sequential<Conv2D<ImageShape{28, 28, 1}, 6, 3>, Relu, MaxPool2D<ImageShape{26, 26, 6}, 2>,
                         Conv2D<ImageShape{13, 13, 6}, 4, 3, Padding::same>, Relu, Dense<13 * 13 * 4, 10>>;
  Adam const adam{.lr = 1e-3f};
  auto const reference = train_weights<Trainer<OneDevice>, Cnn>(30, adam);
  Cnn const untrained(42);
  CHECK(relative_difference(reference, {untrained.parameters().begin(), untrained.parameters().end()}) > 1e-2);
  CHECK(relative_difference(train_weights<Trainer<Mirrored<2>>, Cnn>(30, adam), reference) < 1e-5);
  CHECK(relative_difference(train_weights<Trainer<Mirrored<3>>, Cnn>(30, adam), reference) < 1e-5);
  CHECK(train_weights<Trainer<Mirrored<2>>, Cnn>(30, adam) == train_weights<Trainer<Mirrored<2>>, Cnn>(30, adam));
  Cnn model(42);
  Trainer<OneDevice> split({.intra_op_threads = 2});
  split.fit(model, adam, SoftmaxCrossEntropy{}, fashion(), {.epochs = 1, .batch_size = 30, .seed = 5});
  CHECK(relative_difference({model.parameters().begin(), model.parameters().end()}, reference) < 1e-5);

  // A checkpoint of the trained model loads back bit for bit, and predicts the same.
  TempDir const dir;
  save_checkpoint(dir.path / "cnn.safetensors", model);
  Cnn loaded(1);
  load_checkpoint(dir.path / "cnn.safetensors", loaded);
  CHECK(std::equal(model.parameters().begin(), model.parameters().end(), loaded.parameters().begin()));
  Matrix const x = detail::eigen(fashion().features()).leftCols(20);
  CHECK(model.predict(x) == loaded.predict(x));
}

// A model trains on Mirrored<2>, and on OneDevice with two intra-op threads, what it trains
// on OneDevice alone (within 1e-5), and training moves its weights.
template <class Model>
void check_trains_as_one_device() {
  Adam const adam{.lr = 1e-2f};
  auto const reference = train_weights<Trainer<OneDevice>, Model>(30, adam);
  Model const untrained(42);
  CHECK(relative_difference(reference, {untrained.parameters().begin(), untrained.parameters().end()}) > 1e-2);
  CHECK(relative_difference(train_weights<Trainer<Mirrored<2>>, Model>(30, adam), reference) < 1e-5);
  Model model(42);
  Trainer<OneDevice> split({.intra_op_threads = 2});
  split.fit(model, adam, SoftmaxCrossEntropy{}, fashion(), {.epochs = 1, .batch_size = 30, .seed = 5});
  CHECK(relative_difference({model.parameters().begin(), model.parameters().end()}, reference) < 1e-5);
}

// A strided convolution (overlapping windows under `same`), overlapping max pooling, average
// pooling and a global mean: the replicas' and the intra-op threads' shards train what one
// replica trains.
TEST_CASE("a CNN with strides and average pooling trains on Mirrored<2> and intra-op threads what it trains on OneDevice") {
  using Strided = Conv2D<ImageShape{28, 28, 1}, 6, 3, Padding::same, 2>;  // 14 x 14 x 6
  using Max = MaxPool2D<Strided::output_shape, 3, 2>;                     // 6 x 6 x 6, overlapping windows
  using Average = AveragePooling2D<Max::output_shape, 2>;                 // 3 x 3 x 6
  using Last = Conv2D<Average::output_shape, 8, 3, Padding::same, 2>;     // 2 x 2 x 8
  using Cnn = Sequential<Strided, Relu, Max, Average, Last, Relu, GlobalAveragePooling2D<Last::output_shape>,
                         Dense<8, 10>>;
  check_trains_as_one_device<Cnn>();
}

// A dilated convolution (taps two pixels apart, `same`) and pooling with `same` padding
// (windows that reach past the image): the replicas' and the intra-op threads' shards train
// what one replica trains.
TEST_CASE("a CNN with a dilated convolution and `same` pooling trains on Mirrored<2> and intra-op threads what it trains on OneDevice") {
  using Dilated = Conv2D<ImageShape{28, 28, 1}, 6, 3, Padding::same, 1, 2>;        // 28 x 28 x 6
  using Max = MaxPool2D<Dilated::output_shape, 3, 3, Padding::same>;              // 10 x 10 x 6, a row padded each side
  using Average = AveragePooling2D<Max::output_shape, 3, 3, Padding::same>;       // 4 x 4 x 6, likewise
  static_assert(Max::output_shape.height == 10 && Average::output_shape.height == 4);
  using Cnn = Sequential<Dilated, Relu, Max, Average, Dense<Average::output_shape.size(), 10>>;
  check_trains_as_one_device<Cnn>();
}

// CentralStorage<N> on the CPU: one copy of the variables, N replicas reducing into it. It
// must train what Mirrored<N> trains, bit for bit (the host step is the same), and what
// OneDevice trains on the same global batches.
TEST_CASE_TEMPLATE("CentralStorage<N> matches Mirrored<N> bit for bit and OneDevice within 1e-5", T,
                   Trainer<CentralStorage<2>>, Trainer<CentralStorage<3>>) {
  constexpr int n = T::num_replicas;
  Adam const adam{.lr = 1e-3f};
  auto const central = train_weights<T>(30, adam);
  CHECK(central == train_weights<Trainer<Mirrored<n>>>(30, adam));
  CHECK(relative_difference(central, train_weights<Trainer<OneDevice>>(30, adam)) < 1e-5);
  CHECK(T{}.num_replicas_in_sync() == n);
  CHECK(T::config::describe().find("CentralStorage<" + std::to_string(n) + ">") != std::string::npos);
}

// 602 samples at 30: the last batch has 2 samples, so 2 of 4 replicas get empty shards.
TEST_CASE("a last batch smaller than the replicas leaves some shards empty and still matches OneDevice") {
  Sgd const sgd{.lr = 0.05f, .momentum = 0.9f};
  CHECK(relative_difference(train_weights<Trainer<Mirrored<4>>>(30, sgd, 2, 602),
                            train_weights<Trainer<OneDevice>>(30, sgd, 2, 602)) < 1e-5);
}

TEST_CASE("the same run twice gives bitwise-identical weights") {
  CHECK(train_weights<Trainer<Mirrored<3>>>(30) == train_weights<Trainer<Mirrored<3>>>(30));
  CHECK(train_weights<Trainer<OneDevice>>(30) == train_weights<Trainer<OneDevice>>(30));
}

// Intra-op threads (StrategyOptions::intra_op_threads): OneDevice's GEMMs and its update split
// over 2 or 3 threads end within rounding of the run on one, and the same every run; with
// clipping too (its squared norm is added per thread).
TEST_CASE("intra-op threads: OneDevice split over 2 and 3 threads trains what one thread trains, the same every run") {
  using Wide = Sequential<Dense<784, 256>, Relu, Dropout, Dense<256, 10>>;
  auto run = [](int threads, float clip) {
    Wide model(7, {}, {}, Dropout{0.1f}, {});
    Trainer<OneDevice> trainer({.intra_op_threads = threads});
    CHECK(trainer.strategy().intra_op_threads() == threads);
    trainer.fit(model, Adam{.lr = 1e-3f}, SoftmaxCrossEntropy{}, fashion().take(600),
                {.epochs = 1, .batch_size = 120, .seed = 5, .clip_global_norm = clip});
    return std::vector<float>(model.parameters().begin(), model.parameters().end());
  };
  Wide const untrained(7);
  std::vector<float> const initial(untrained.parameters().begin(), untrained.parameters().end());
  for (float clip : {0.0f, 0.5f}) {
    auto const one = run(1, clip);
    CHECK(relative_difference(one, initial) > 1e-3);  // it trained
    CHECK(relative_difference(run(2, clip), one) < 1e-5);
    CHECK(relative_difference(run(3, clip), one) < 1e-5);
    CHECK(run(2, clip) == run(2, clip));
  }
  // Automatic: the available cores over the replicas. Negative: an error naming the value.
  CHECK(Trainer<OneDevice>().strategy().intra_op_threads() == available_cores());
  CHECK(Trainer<Mirrored<2>>().strategy().intra_op_threads() == std::max(1, available_cores() / 2));
  CHECK_THROWS_WITH_AS(Trainer<OneDevice>({.intra_op_threads = -1}), doctest::Contains("intra_op_threads -1"),
                       ConfigError);
}

// GradAccum<K> at batch B takes one step per K*B samples: the same steps as one replica at batch K*B
// (the shuffled order of an epoch does not depend on the batch size). 610 = 10 full groups + a last,
// partial one, which is applied at the end of the epoch.
TEST_CASE("GradAccum<K> reproduces a single step on the K-times larger batch") {
  auto const big = train_weights<Trainer<OneDevice>, PlainModel>(60, Sgd{.lr = 0.05f, .momentum = 0.9f}, 2);
  CHECK(relative_difference(train_weights<Trainer<GradAccum<2>>, PlainModel>(30, Sgd{.lr = 0.05f, .momentum = 0.9f}, 2), big) < 1e-5);
  CHECK(relative_difference(train_weights<Trainer<Mirrored<3>, GradAccum<2>>, PlainModel>(30, Sgd{.lr = 0.05f, .momentum = 0.9f}, 2), big) < 1e-5);
  auto const bigger = train_weights<Trainer<OneDevice>, PlainModel>(240, Adam{}, 1);
  CHECK(relative_difference(train_weights<Trainer<GradAccum<8>, Mirrored<2>>, PlainModel>(30, Adam{}, 1), bigger) < 1e-5);
  CHECK(relative_difference(train_weights<Trainer<GradAccum<1>>, PlainModel>(30, Adam{}, 1),
                            train_weights<Trainer<OneDevice>, PlainModel>(30, Adam{}, 1)) == 0.0);
}

TEST_CASE("fit learns Fashion-MNIST, fills History, and evaluate/predict agree with it") {
  auto train = data::fashion_mnist(data::Split::train).take(4000);
  auto test = data::fashion_mnist(data::Split::test).take(1000);
  PlainModel model(1);
  Trainer<Mirrored<2>> trainer;
  auto history = trainer.fit(model, Adam{.lr = 2e-3f}, SoftmaxCrossEntropy{}, train,
                             {.epochs = 3, .batch_size = 64, .validation = test});
  CHECK(history.epochs() == 3);
  CHECK(history["loss"].size() == 3);
  CHECK(history["loss"].back() < history["loss"].front());
  CHECK(history["val_accuracy"].back() > 0.75);
  CHECK_THROWS_AS((void)history["precision"], Error);
  auto const evaluation = trainer.evaluate(model, SoftmaxCrossEntropy{}, test, 100);
  CHECK(evaluation.samples == 1000);
  CHECK(*evaluation.accuracy == doctest::Approx(history["val_accuracy"].back()).epsilon(1e-9));
  Matrix const distributed = trainer.predict(model, test, 77);
  Matrix const single = model.predict(Matrix(detail::eigen(test.features())));
  CHECK((distributed - single).cwiseAbs().maxCoeff() < 1e-4f);
}

TEST_CASE("MeanSquaredError regression learns a linear map (closed form y = A x)") {
  Matrix a(2, 3);
  a << 1, -2, 0.5, 0, 1, 1;
  Matrix x = Matrix::Random(3, 512);
  Dataset data(x, a * x);
  Sequential<Dense<3, 2>> model(3);
  Trainer<Mirrored<2>> trainer;
  auto history = trainer.fit(model, Adam{.lr = 0.05f}, MeanSquaredError{}, data, {.epochs = 60, .batch_size = 64});
  CHECK_FALSE(history.contains("accuracy"));
  CHECK(history["loss"].back() < 1e-4);
  CHECK((Eigen::Map<Matrix const>(model.parameters().data(), 2, 3) - a).cwiseAbs().maxCoeff() < 0.02f);
}

// A model with the new kinds of layer (own scratch, a skip connection, a normalisation) under
// the strategies and precisions: Mirrored<N> against OneDevice, mixed precision close to float.
TEST_CASE("a model with LayerNorm and Residual trains the same on Mirrored<3> as on OneDevice") {
  using Normed = Sequential<Dense<784, 32>, LayerNorm, Residual<Sequential<Dense<32, 48>, Gelu, Dense<48, 32>>>,
                            Dropout, Dense<32, 10>>;
  auto run = [&]<class T>(T trainer) {
    Normed model(42, {}, {}, {}, Dropout{0.2f}, {});
    trainer.fit(model, Adam{.lr = 1e-3f}, SoftmaxCrossEntropy{}, fashion(), {.epochs = 1, .batch_size = 30, .seed = 5});
    return std::vector<float>(model.parameters().begin(), model.parameters().end());
  };
  auto const reference = run(Trainer<OneDevice>{});
  CHECK(relative_difference(run(Trainer<Mirrored<3>>{}), reference) < 1e-5);
  CHECK(relative_difference(run(Trainer<Mirrored<2>, GradAccum<1>>{}), reference) < 1e-5);
  double const bf16 = relative_difference(run(Trainer<Mirrored<2>, MixedPrecision>{}), reference);
  CHECK(bf16 > 0.0);   // 16-bit storage changes the arithmetic ...
  CHECK(bf16 < 2e-2);  // ... by about bf16's resolution after 21 Adam steps
}

namespace {
// (Run by the engine twins too: on oneDNN under MixedPrecision the products read the bf16 copy.)
// fit validates on the runner's own passes and the weights its forward reads (RunnerReplicas).
// Oracles: a fresh trainer's evaluate on each epoch's weights (its own passes, its own copy of
// the weights rounded from the host's), and the same fit without validation.
template <class T>
void check_validation_on_runner_passes() {
  Dataset const train = fashion().take(100), validation = fashion().skip(100).take(60);
  auto const make = [] { return Model(42, {}, {}, Dropout{0.2f}, {}); };
  auto const options = [&](bool validate) {
    FitOptions o{.epochs = 3, .batch_size = 20, .seed = 4};  // 5 batches: GradAccum<2> flushes a partial group
    if (validate) o.validation = validation;
    return o;
  };
  Model validated = make(), plain = make();
  std::vector<std::vector<float>> weights;
  History const with = T().fit(validated, Adam{}, SoftmaxCrossEntropy{}, train, options(true),
                               WeightsAfterEachEpoch<Model>{&validated, &weights});
  History const without = T().fit(plain, Adam{}, SoftmaxCrossEntropy{}, train, options(false));
  // Validation between epochs leaves the passes as training needs them: the same losses, bit for bit.
  CHECK(with["loss"] == without["loss"]);
  CHECK(std::equal(validated.parameters().begin(), validated.parameters().end(), plain.parameters().begin()));
  REQUIRE(weights.size() == 3);
  REQUIRE(with["val_loss"].size() == 3);
  for (std::size_t e = 0; e < 3; ++e) {
    Model model = make();
    std::copy(weights[e].begin(), weights[e].end(), model.parameters().begin());
    Evaluation const expected = T().evaluate(model, SoftmaxCrossEntropy{}, validation, 20);
    CHECK(with["val_loss"][e] == expected.loss);
    CHECK(with["val_accuracy"][e] == *expected.accuracy);
  }
  CHECK(with["val_loss"][0] != with["val_loss"][2]);  // each epoch validates its own weights
}
}  // namespace

TEST_CASE("fit validates on the runner's passes: evaluate's figures on each epoch's weights, training unchanged") {
  SUBCASE("fp32, Mirrored<2>") { check_validation_on_runner_passes<Trainer<Mirrored<2>>>(); }
  SUBCASE("MixedPrecision, GradAccum<2>: the rounded weights the last update left") {
    check_validation_on_runner_passes<Trainer<Mirrored<2>, MixedPrecision, GradAccum<2>>>();
  }
}

// The rest checks fit's bookkeeping, its callbacks and the gradients' crossing between replicas,
// none of which depends on the engine that multiplies: the engine twins (test_trainer_openblas,
// test_trainer_dnnl) compile only the cases above.
#if !defined(STRATA_TEST_ENGINE_TWIN)

namespace {
struct StopAfter {
  std::int64_t batches;
  std::int64_t seen = 0;
  bool on_batch_end(BatchLogs const&) { return ++seen >= batches; }
};
struct Recorder {
  std::vector<std::string> events;
  void on_train_begin(TrainBegin const& info) { events.push_back("begin " + std::to_string(info.steps_per_epoch)); }
  void on_epoch_begin(int epoch) { events.push_back("epoch " + std::to_string(epoch)); }
  void on_epoch_end(EpochLogs const& logs) { events.push_back("end " + std::to_string(logs.steps)); }
  void on_train_end(History const& h) { events.push_back("done " + std::to_string(h.epochs())); }
};
}  // namespace

TEST_CASE("callbacks: hooks are detected, a true return stops training") {
  auto data = fashion().take(100);
  PlainModel model;
  Trainer<Mirrored<2>> trainer;
  StopAfter stop{3};
  Recorder recorder;
  auto history = trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, data, {.epochs = 5, .batch_size = 10}, stop, recorder);
  CHECK(stop.seen == 3);
  CHECK(history.epochs() == 1);
  CHECK(recorder.events == std::vector<std::string>{"begin 10", "epoch 0", "end 3", "done 1"});
}

TEST_CASE("EarlyStopping stops after `patience` epochs without improvement and names a missing metric") {
  EarlyStopping early{.monitor = "val_loss", .patience = 1};
  early.on_train_begin({});
  auto epoch = [&](int e, double value) {
    EpochLogs logs{.epoch = e, .loss = 1.0, .val_loss = value};
    return early.on_epoch_end(logs);
  };
  CHECK_FALSE(epoch(0, 1.0));
  CHECK_FALSE(epoch(1, 0.5));
  CHECK_FALSE(epoch(2, 0.6));
  CHECK(epoch(3, 0.55));
  CHECK(early.stopped_epoch == 3);
  CHECK(early.best == 0.5);
  EarlyStopping accuracy{.monitor = "val_accuracy"};
  accuracy.on_train_begin({});
  CHECK_FALSE(accuracy.on_epoch_end({.val_accuracy = 0.5}));
  CHECK(accuracy.on_epoch_end({.val_accuracy = 0.4}));  // accuracies are maximised
  EarlyStopping missing{.monitor = "val_loss"};
  CHECK_THROWS_WITH_AS(missing.on_epoch_end({.loss = 1.0}),
                       doctest::Contains("monitor 'val_loss' is not a metric of this run (it has loss)"), ConfigError);
  // Inside fit, on a run that stops improving.
  PlainModel model;
  Trainer<> trainer;
  EarlyStopping in_fit{.monitor = "loss", .patience = 0, .min_delta = 10.0};
  auto h = trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion().take(60), {.epochs = 5, .batch_size = 20}, in_fit);
  CHECK(h.epochs() == 2);
}

namespace {
// The oracle for restore_best_weights: the weights at the end of every epoch, as fit hands them to callbacks.
std::vector<float> all_weights(io::TrainingState const& state) {
  std::vector<float> all;
  for (io::StateTensor const& t : state.weights) all.insert(all.end(), t.values.begin(), t.values.end());
  return all;
}
struct WeightsAtEpochEnd {
  std::vector<std::vector<float>> epochs;
  void on_epoch_end(EpochLogs const&, io::TrainingState const& state) { epochs.push_back(all_weights(state)); }
};

// fit with EarlyStopping on the training loss with "max" as the better direction: the loss
// falls every epoch, so epoch 0 is the best, whatever the arithmetic's last bits.
template <class T>
void check_restore_best_weights(bool restore, int patience, int epochs, int ran, int stopped) {
  CAPTURE(restore);
  CAPTURE(patience);
  PlainModel model(3);
  WeightsAtEpochEnd seen;
  EarlyStopping early{.monitor = "loss", .patience = patience, .mode = EarlyStopping::Mode::max,
                      .restore_best_weights = restore};
  // With a validation set: GCC 12 with -fsanitize=thread at -O1 takes a disengaged one for uninitialised here.
  FitOptions const options{.epochs = epochs, .batch_size = 20, .validation = fashion().take(60)};
  History const h = T().fit(model, Sgd{.lr = 0.05f, .momentum = 0.9f}, SoftmaxCrossEntropy{}, fashion().take(200),
                            options, seen, early);
  REQUIRE(h.epochs() == ran);
  for (int e = 1; e < ran; ++e) REQUIRE(h["loss"][std::size_t(e)] < h["loss"][std::size_t(e - 1)]);
  CHECK(early.best_epoch == 0);
  CHECK(early.stopped_epoch == stopped);
  std::vector<float> const after = all_weights(io::training_state(model));
  REQUIRE(seen.epochs.size() == std::size_t(ran));
  CHECK(seen.epochs.front() != seen.epochs.back());
  CHECK(after == (restore ? seen.epochs.front() : seen.epochs.back()));
  CHECK(early.restored_epoch == (restore ? 0 : -1));
}
}  // namespace

TEST_CASE_TEMPLATE("EarlyStopping restore_best_weights: the model ends fit with its best epoch's weights, "
                   "stopped early or not", T, Trainer<>, Trainer<Mirrored<2>, MixedPrecision>) {
  check_restore_best_weights<T>(true, 1, 5, 3, 2);    // stopped after epoch 2: epoch 0's weights
  check_restore_best_weights<T>(true, 10, 3, 3, -1);  // ran every epoch: epoch 0's weights all the same (as Keras 3)
  check_restore_best_weights<T>(false, 1, 5, 3, 2);   // off: the last epoch's
}

TEST_CASE("EarlyStopping restore_best_weights refuses weights kept for another model, and changes nothing") {
  EarlyStopping early{.monitor = "loss", .restore_best_weights = true};
  PlainModel small(1);
  io::TrainingState kept = io::training_state(small);
  early.on_train_begin({});
  early.on_epoch_end({.loss = 1.0}, kept);
  REQUIRE(early.best_weights.size() == all_weights(kept).size());
  Sequential<Dense<784, 16>, Relu, Dense<16, 10>> other(2);
  io::TrainingState state = io::training_state(other);
  std::vector<float> const before = all_weights(state);
  CHECK_THROWS_WITH_AS(early.on_train_end(History{}, state),
                       doctest::Contains("kept 25450 weights of epoch 0, but this model has 12730"), ConfigError);
  CHECK(all_weights(state) == before);
  CHECK(early.restored_epoch == -1);
}

TEST_CASE("CsvLogger writes a header and one row per epoch; ProgressBar prints Keras-style lines") {
  TempDir dir;
  auto path = dir.path / "log.csv";
  std::ostringstream progress;
  PlainModel model;
  Trainer<Mirrored<2>> trainer;
  trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion().take(60),
              {.epochs = 2, .batch_size = 20, .validation = fashion().take(20)}, CsvLogger(path),
              ProgressBar(progress));
  std::ifstream in(path);
  std::string header, row0, row1, extra;
  std::getline(in, header);
  std::getline(in, row0);
  std::getline(in, row1);
  CHECK(header == "epoch,loss,accuracy,val_loss,val_accuracy");
  CHECK(row0.rfind("0,", 0) == 0);
  CHECK(row1.rfind("1,", 0) == 0);
  CHECK_FALSE(std::getline(in, extra));
  std::string const text = progress.str();
  CHECK(text.find("Epoch 1/2\n3/3 [==============================] - ") == 0);
  CHECK(text.find(" - val_accuracy: ") != std::string::npos);
  CHECK_THROWS_AS(trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion().take(20), {.batch_size = 20},
                              CsvLogger(dir.path / "no" / "such" / "dir.csv")),
                  IoError);
}

TEST_CASE("bad input to fit is reported with the value and loses nothing") {
  PlainModel model(9);
  std::vector<float> const before(model.parameters().begin(), model.parameters().end());
  Trainer<Mirrored<4>> trainer;
  SoftmaxCrossEntropy const loss;
  auto narrow = Dataset(Matrix::Zero(783, 8), std::vector<std::int32_t>(8, 1));
  CHECK_THROWS_WITH_AS(trainer.fit(model, Sgd{}, loss, narrow, {.batch_size = 4}),
                       "Dense<784, 32>: input has 783 features, the model expects 784", ShapeError);
  auto bad_label = Dataset(Matrix::Zero(784, 8), std::vector<std::int32_t>{0, 1, 2, 3, 10, 5, 6, 7});
  CHECK_THROWS_WITH_AS(trainer.fit(model, Sgd{}, loss, bad_label, {.batch_size = 4}),
                       doctest::Contains("label 10 of sample 4 is not a class index in [0, 10)"), DataError);
  CHECK_THROWS_WITH_AS(trainer.fit(model, Sgd{}, loss, fashion().take(0), {.batch_size = 4}),
                       "fit: the training dataset is empty; give it at least one sample", DataError);
  CHECK_THROWS_WITH_AS(trainer.fit(model, Sgd{}, loss, fashion().take(40), {.batch_size = 3}),
                       doctest::Contains("global batch size 3 is smaller than the 4 replicas in sync"), ConfigError);
  CHECK_THROWS_AS(trainer.fit(model, Sgd{}, loss, fashion().take(40), {.epochs = 0, .batch_size = 8}), ConfigError);
  CHECK_THROWS_AS(trainer.fit(model, Sgd{.lr = 0.0f}, loss, fashion().take(40), {.batch_size = 8}), ConfigError);
  CHECK_THROWS_AS(trainer.fit(model, Sgd{}, loss, fashion().take(40), {.batch_size = 8, .validation = bad_label}),
                  DataError);
  CHECK_THROWS_AS((void)trainer.evaluate(model, loss, narrow), ShapeError);
  CHECK_THROWS_AS((void)trainer.predict(model, fashion().take(0)), DataError);
  CHECK(std::vector<float>(model.parameters().begin(), model.parameters().end()) == before);
  // A batch that does not divide over the replicas, and a last batch smaller than them (38 = 6 * 6 + 2), both train.
  CHECK_NOTHROW(trainer.fit(model, Sgd{}, loss, fashion().take(38), {.batch_size = 6}));
}

namespace {
// The step's second part exchanged: the gradients all-reduced in buckets over a
// ThreadCommunicator (the path a multi-process strategy takes) instead of read in place.
template <int N, std::size_t BucketBytes>
using BucketSync = train::CommunicatorSync<comm::ThreadCommunicator, N, BucketBytes>;

// `batches` global batches of 30 from the training set, the last one of 10, then a flush.
template <class Config, class Sync, class Opt, class... SyncArguments>
std::vector<float> step_weights(Opt optimizer, train::StepOptions options, int batches, SyncArguments&&... sync_arguments) {
  strategy::BasicStrategy<Config> strategy;
  PlainModel model(42);
  train::StepRunner<Config, PlainModel, Opt, SoftmaxCrossEntropy, Sync> runner(
      strategy, model, optimizer, SoftmaxCrossEntropy{}, 30, 7, options, sync_arguments...);
  CHECK(runner.num_replicas_in_sync() == Config::num_replicas);
  auto const& data = fashion();
  for (int i = 0; i < batches; ++i) {
    int const size = i + 1 == batches ? 10 : 30;
    data::Batch const batch{data.features().columns(i * 30, size), data.targets().columns(i * 30, size),
                            size, i};
    runner.train_on_batch(batch);
  }
  runner.flush();
  return {model.parameters().begin(), model.parameters().end()};
}

template <class Config, class Opt, std::size_t BucketBytes>
void check_communicator_sync(Opt optimizer, train::StepOptions options, comm::Overlap overlap) {
  constexpr int n = Config::num_replicas;
  auto const reference = step_weights<Config, train::ThreadSync<n>>(optimizer, options, 5);
  comm::Rendezvous world(n);
  auto const bucketed = step_weights<Config, BucketSync<n, BucketBytes>>(
      optimizer, options, 5, [&](int r) { return comm::ThreadCommunicator(world, r); }, overlap);
  CHECK(bucketed == reference);  // both sum in replica order, then scale: the same bits
}
}  // namespace

TEST_CASE("a step whose gradients cross replicas over a Communicator in buckets matches the in-place thread sync") {
  using comm::Overlap;
  // One 25 MiB bucket, and 4 KiB buckets (one per layer: the comm thread reduces during backward).
  check_communicator_sync<policy::Config<Mirrored<2>>, Sgd, std::size_t{25} << 20>(Sgd{.lr = 0.05f, .momentum = 0.9f}, {},
                                                                                  Overlap::comm_thread);
  check_communicator_sync<policy::Config<Mirrored<2>>, Adam, 4096>(Adam{}, {}, Overlap::comm_thread);
  check_communicator_sync<policy::Config<Mirrored<3>>, Adam, 4096>(Adam{}, {}, Overlap::in_backward);
  check_communicator_sync<policy::Config<Mirrored<2>>, Adam, 4096>(Adam{}, {}, Overlap::after_backward);
  // Accumulation (the partial last group is flushed), clipping by the global norm, Lamb's
  // per-tensor norms and mixed precision: every global quantity of the update.
  check_communicator_sync<policy::Config<Mirrored<2>, GradAccum<2>>, Adam, 4096>(Adam{}, {}, Overlap::comm_thread);
  check_communicator_sync<policy::Config<Mirrored<2>>, Adam, 4096>(Adam{}, {.clip_global_norm = 0.1f},
                                                                  Overlap::comm_thread);
  check_communicator_sync<policy::Config<Mirrored<2>>, Lamb, 4096>(Lamb{}, {}, Overlap::comm_thread);
  check_communicator_sync<policy::Config<Mirrored<2>, MixedPrecision>, Adam, 4096>(Adam{}, {}, Overlap::comm_thread);

  // A communicator whose world is no whole number of this process's replicas.
  strategy::BasicStrategy<policy::Config<Mirrored<2>>> strategy;
  PlainModel model(42);
  comm::Rendezvous three(3);
  using Runner = train::StepRunner<policy::Config<Mirrored<2>>, PlainModel, Sgd, SoftmaxCrossEntropy, BucketSync<2, 4096>>;
  CHECK_THROWS_WITH_AS(Runner(strategy, model, Sgd{}, SoftmaxCrossEntropy{}, 30, 7, {},
                              [&](int r) { return comm::ThreadCommunicator(three, r); }),
                       "CommunicatorSync: a world of 3 replicas is not a whole number of processes of 2", ConfigError);
}

namespace {
// Compress<T>: the buckets cross as T. The oracle rounds every replica's gradient to T, sums
// in fp32 in replica order and rounds the sum (tests/rounded_sum_sync.hpp).
template <class T, class Config, class Opt>
void check_compressed_sync(Opt optimizer, comm::Overlap overlap) {
  constexpr int n = Config::num_replicas;
  auto const oracle = step_weights<Config, RoundedSumSync<T, n>>(optimizer, {}, 5);
  comm::Rendezvous world(n);
  using Compressed = train::CommunicatorSync<comm::ThreadCommunicator, n, 4096, T>;
  static_assert(std::is_same_v<typename Compressed::wire_type, T>);
  auto const compressed = step_weights<Config, Compressed>(
      optimizer, {}, 5, [&](int r) { return comm::ThreadCommunicator(world, r); }, overlap);
  CHECK(compressed == oracle);
  auto const uncompressed = step_weights<Config, train::ThreadSync<n>>(optimizer, {}, 5);
  CHECK(compressed != uncompressed);                            // the gradients were rounded ...
  CHECK(relative_difference(compressed, uncompressed) < 1e-2);  // ... to T's precision
}
}  // namespace

TEST_CASE_TEMPLATE("Compress<T>: buckets crossing as T give the weights of gradients rounded to T and summed in fp32",
                   T, bf16, fp16) {
  using comm::Overlap;
  check_compressed_sync<T, policy::Config<Mirrored<2>>>(Sgd{.lr = 0.05f, .momentum = 0.9f}, Overlap::comm_thread);
  check_compressed_sync<T, policy::Config<Mirrored<3>>>(Adam{}, Overlap::in_backward);
  check_compressed_sync<T, policy::Config<Mirrored<2>, GradAccum<2>>>(Adam{}, Overlap::comm_thread);
  check_compressed_sync<T, policy::Config<Mirrored<2>, MixedPrecision>>(Adam{}, Overlap::after_backward);
}

// ---- Epochs of steps_per_epoch steps, and validation every few epochs ----

namespace {
// A sample's first pixel, which tells the samples of these tests apart.
std::vector<float> first_pixels(data::Batch const& b) {
  std::vector<float> out;
  for (int i = 0; i < b.size; ++i) out.push_back(b.features.data[std::size_t(i) * std::size_t(b.features.rows)]);
  return out;
}

// Every batch's loss and samples, as on_batch_end shows them (running means of the epoch).
struct BatchLosses {
  std::vector<double> running;
  void on_batch_end(BatchLogs const& logs) { running.push_back(logs.loss); }
};
}  // namespace

TEST_CASE("EpochStream: an epoch of S steps is the next S batches of pass after pass, each pass reshuffled") {
  // 25 samples whose first pixel is their number, batches of 10: passes of 10, 10 and 5.
  Matrix features = Matrix::Zero(784, 25);
  for (int i = 0; i < 25; ++i) features(0, i) = float(i);
  Dataset const data(features, std::vector<std::int32_t>(25, 0));
  strategy::SharedInput const input(data, 10, /*shuffle=*/true, /*seed=*/3, /*prefetch=*/1);
  REQUIRE(input.batches_per_pass() == 3);
  // The oracle: the passes one after another, as a plain fit reads them (a pass per epoch).
  std::vector<std::vector<float>> passes;
  for (std::int64_t p = 0; p < 4; ++p) {
    strategy::PassStream stream = input.pass(p, 0);
    while (auto const* step = stream.next()) passes.push_back(first_pixels(*step->batch));
  }
  REQUIRE(passes[0] != passes[3]);  // reshuffled: pass 1 is another order
  for (std::int64_t s : {1, 2, 3, 4, 7}) {
    CAPTURE(s);
    std::size_t at = 0;
    for (std::int64_t epoch = 0; at + std::size_t(s) <= passes.size(); ++epoch) {
      strategy::EpochStream stream(input, s, epoch, 0);
      CHECK(stream.batches() == s);
      for (std::int64_t i = 0; i < s; ++i, ++at) {
        auto const* step = stream.next();
        REQUIRE(step != nullptr);
        CHECK(step->batch->index == i);  // its step in the epoch, whichever pass it comes from
        CHECK(first_pixels(*step->batch) == passes[at]);
      }
      CHECK(stream.next() == nullptr);
    }
  }
  // A resumed epoch starts at its step: epoch 1 of 4 steps, from step 2, is the pass sequence's step 6.
  strategy::EpochStream resumed(input, 4, 1, 2);
  for (std::size_t at = 6; at < 8; ++at) CHECK(first_pixels(*resumed.next()->batch) == passes[at]);
  CHECK(resumed.next() == nullptr);
  // Without S an epoch is a pass.
  strategy::EpochStream whole(input, 0, 2, 0);
  CHECK(whole.batches() == 3);
  for (std::size_t at = 6; at < 9; ++at) CHECK(first_pixels(*whole.next()->batch) == passes[at]);
}

// 610 samples at a global batch of 30: passes of 21 batches. Epochs of 7 steps: three per
// pass; of 6 under GradAccum<3>: windows that line up with a pass's.
TEST_CASE_TEMPLATE("fit with steps_per_epoch trains what whole passes train, bit for bit, with each epoch's own metrics",
                   T, Trainer<OneDevice>, Trainer<Mirrored<2>>, Trainer<Mirrored<2>, GradAccum<3>>) {
  std::int64_t const s = T::config::accumulation_steps == 3 ? 6 : 7;
  int const epochs = int(42 / s);
  Model passes(42, {}, {}, Dropout{0.2f}, {});
  Model stepped(42, {}, {}, Dropout{0.2f}, {});
  BatchLosses per_pass, per_epoch;
  Recorder recorder;
  History const whole = T().fit(passes, Sgd{.lr = 0.05f, .momentum = 0.9f}, SoftmaxCrossEntropy{}, fashion(),
                                {.epochs = 2, .batch_size = 30, .seed = 5}, per_pass);
  History const h = T().fit(stepped, Sgd{.lr = 0.05f, .momentum = 0.9f}, SoftmaxCrossEntropy{}, fashion(),
                            {.epochs = epochs, .batch_size = 30, .seed = 5, .steps_per_epoch = s}, per_epoch, recorder);
  CHECK(std::vector<float>(stepped.parameters().begin(), stepped.parameters().end()) ==
        std::vector<float>(passes.parameters().begin(), passes.parameters().end()));
  REQUIRE(h.epochs() == epochs);
  CHECK(recorder.events.front() == "begin " + std::to_string(s));
  CHECK(recorder.events[2] == "end " + std::to_string(s));
  // Epoch e's loss is the mean over its batches' samples: from the whole passes' running
  // means, (sum to its last batch - sum to the batch before it) / its samples.
  REQUIRE(per_pass.running.size() == 42);
  auto const samples_to = [](std::int64_t n) { return double(n < 21 ? 30 * n : 610); };  // in a pass's first n
  auto const sum_to = [&](std::int64_t n) {  // the losses summed over the run's first n batches
    if (n <= 21) return per_pass.running[std::size_t(n - 1)] * samples_to(n);
    return per_pass.running[20] * 610.0 + per_pass.running[std::size_t(n - 1)] * samples_to(n - 21);
  };
  for (int e = 0; e < epochs; ++e) {
    std::int64_t const first = e * s, last = first + s;  // the epoch's batches [first, last)
    double const samples = double(30 * s - ((first < 21 && last >= 21) || (first < 42 && last >= 42) ? 20 : 0));
    double const before = first ? sum_to(first) : 0.0;
    CAPTURE(e);
    CHECK(h["loss"][std::size_t(e)] == doctest::Approx((sum_to(last) - before) / samples).epsilon(1e-9));
  }
}

TEST_CASE("validation_freq: validation after every n-th epoch only, the same figures as every epoch's; callbacks skip the rest") {
  TempDir dir;
  auto const run = [&](int freq, auto&&... callbacks) {
    PlainModel model(3);
    return Trainer<Mirrored<2>>().fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion().take(120),
                                      {.epochs = 5, .batch_size = 20, .validation = fashion().take(40), .seed = 1,
                                       .validation_freq = freq},
                                      callbacks...);
  };
  History const every = run(1);
  History const second = run(2, CsvLogger(dir.path / "log.csv"));
  // Validation changes no weight: epochs 1 and 3 validate to the every-epoch run's figures.
  CHECK(second["loss"] == every["loss"]);
  CHECK(second["val_loss"] == std::vector<double>{every["val_loss"][1], every["val_loss"][3]});
  CHECK(second["val_accuracy"] == std::vector<double>{every["val_accuracy"][1], every["val_accuracy"][3]});
  std::ifstream in(dir.path / "log.csv");
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(line);
  REQUIRE(rows.size() == 6);
  CHECK(rows[0] == "epoch,loss,accuracy,val_loss,val_accuracy");
  CHECK(rows[1].ends_with(",NA,NA"));
  CHECK_FALSE(rows[2].ends_with(",NA"));
  CHECK(rows[5].ends_with(",NA,NA"));

  // EarlyStopping counts the validated epochs only; a validated epoch without the metric is still an error.
  EarlyStopping early{.monitor = "val_loss", .patience = 0};
  early.on_train_begin({.validation_freq = 2});
  CHECK_FALSE(early.on_epoch_end({.epoch = 0, .loss = 1.0}));
  CHECK_FALSE(early.on_epoch_end({.epoch = 1, .loss = 1.0, .val_loss = 1.0}));
  CHECK_FALSE(early.on_epoch_end({.epoch = 2, .loss = 1.0}));  // skipped, not a worse epoch
  CHECK(early.wait == 0);
  CHECK(early.on_epoch_end({.epoch = 3, .loss = 1.0, .val_loss = 1.5}));
  CHECK(early.stopped_epoch == 3);
  EarlyStopping missing{.monitor = "val_loss"};
  missing.on_train_begin({.validation_freq = 2});
  CHECK_THROWS_WITH_AS(missing.on_epoch_end({.epoch = 1, .loss = 1.0}),
                       doctest::Contains("monitor 'val_loss' is not a metric of this run"), ConfigError);
  // ModelCheckpoint(save_best_only) saves after validated epochs only.
  ModelCheckpoint best{.directory = dir.path / "best", .save_best_only = true, .save_weights_only = true};
  History const h = run(2, best);
  CHECK(best.saves == 1 + int(h["val_loss"][1] < h["val_loss"][0]));
}

TEST_CASE("validation_split: the last samples before shuffling validate and are not trained on, as Keras picks them") {
  // Keras: split_at = ceil(n * (1 - validation_split)); for 100 samples and 0.15, 85 train.
  Dataset const data = fashion().take(100);
  auto const run = [&](Dataset const& train, FitOptions const& options) {
    PlainModel model(4);
    History h = Trainer<Mirrored<2>>().fit(model, Sgd{}, SoftmaxCrossEntropy{}, train, options);
    return std::pair(std::move(h), std::vector<float>(model.parameters().begin(), model.parameters().end()));
  };
  auto const [split, split_weights] = run(data, {.epochs = 2, .batch_size = 16, .validation_split = 0.15, .seed = 3});
  auto const [given, given_weights] =
      run(data.take(85), {.epochs = 2, .batch_size = 16, .validation = data.skip(85), .seed = 3});
  CHECK(split_weights == given_weights);
  CHECK(split["loss"] == given["loss"]);
  CHECK(split["val_loss"] == given["val_loss"]);
  REQUIRE(split["val_accuracy"].size() == 2);
  CHECK(split["val_accuracy"] == given["val_accuracy"]);
  // One sample fewer trained on is another run: the split is not 86 / 14.
  auto const [other, other_weights] =
      run(data.take(86), {.epochs = 2, .batch_size = 16, .validation = data.skip(86), .seed = 3});
  CHECK(other_weights != split_weights);
  // Keras' rounding up, where the product is not whole: 10 samples, 0.25 -> ceil(7.5) = 8 train.
  train::SplitTraining const ten = train::split_validation(fashion().take(10), {.validation_split = 0.25});
  CHECK(ten.train.size() == 8);
  CHECK(ten.options.validation->size() == 2);
  CHECK(train::split_validation(fashion().take(600), {.validation_split = 0.1}).train.size() == 540);
}

TEST_CASE("validation_split: bad values and combinations name themselves and train nothing") {
  PlainModel model(9);
  std::vector<float> const before(model.parameters().begin(), model.parameters().end());
  Trainer<> trainer;
  auto const fit = [&](FitOptions const& options) { trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion().take(10), options); };
  CHECK_THROWS_WITH_AS(fit({.batch_size = 8, .validation_split = 1.0}),
                       "fit: validation_split 1 must be in [0, 1): the fraction of the training data that validates",
                       ConfigError);
  CHECK_THROWS_WITH_AS(fit({.batch_size = 8, .validation_split = -0.1}), doctest::Contains("validation_split -0.1 must be in [0, 1)"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(fit({.batch_size = 8, .validation_split = std::nan("")}), doctest::Contains("must be in [0, 1)"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(fit({.batch_size = 8, .validation = fashion().take(4), .validation_split = 0.2}),
                       "fit: validation_split 0.2 and FitOptions::validation are both given; give one of them", ConfigError);
  CHECK_THROWS_WITH_AS(fit({.batch_size = 8, .validation_split = 0.01}),
                       "fit: validation_split 0.01 of 10 samples leaves no sample to validate; give a fraction that sets "
                       "apart between 1 and 9 samples",
                       DataError);
  // Per-worker input has no one dataset to split.
  CHECK_THROWS_WITH_AS(trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{},
                                   strategy::PerWorker{[](strategy::InputContext const&) { return fashion().take(10); }},
                                   {.batch_size = 8, .validation_split = 0.2}),
                       doctest::Contains("needs one training Dataset to split"), ConfigError);
  // validation_freq counts a split's validation as validation.
  CHECK_NOTHROW(train::check_fit_options({.validation_split = 0.2, .validation_freq = 2}));
  CHECK(std::vector<float>(model.parameters().begin(), model.parameters().end()) == before);
}

TEST_CASE("steps_per_epoch and validation_freq: bad values name themselves and train nothing") {
  PlainModel model(9);
  std::vector<float> const before(model.parameters().begin(), model.parameters().end());
  Trainer<> trainer;
  auto const fit = [&](FitOptions const& options) { trainer.fit(model, Sgd{}, SoftmaxCrossEntropy{}, fashion().take(40), options); };
  CHECK_THROWS_WITH_AS(fit({.batch_size = 8, .steps_per_epoch = -1}),
                       "fit: steps_per_epoch -1 must be >= 0 (0: an epoch is one pass over the data)", ConfigError);
  CHECK_THROWS_WITH_AS(fit({.batch_size = 8, .validation = fashion().take(8), .validation_freq = 0}),
                       "fit: validation_freq 0 must be >= 1 (1: validate after every epoch)", ConfigError);
  CHECK_THROWS_WITH_AS(fit({.batch_size = 8, .validation_freq = 2}),
                       "fit: validation_freq 2 without FitOptions::validation; give the validation dataset", ConfigError);
  CHECK(std::vector<float>(model.parameters().begin(), model.parameters().end()) == before);
}

#endif  // !defined(STRATA_TEST_ENGINE_TWIN)
