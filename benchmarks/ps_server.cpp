// What one ParameterServer server sustains, for the anchor MLP (784-1024-1024-10:
// 1,863,690 floats, 7.5 MB) held whole on one server:
//   Server/push/<Opt>   ShardServer::handle of a push (the frame made once, outside the
//                       loop): check it, copy the gradient out, apply the optimizer to every
//                       float: the server's update throughput
//   Server/pull         ShardServer::handle of a pull: the weights into a reply frame
//   Optimizer/<Opt>     the optimizer's own update over the same floats, for comparison
//   InprocPull          a worker's pull of the whole model from a server thread through a
//                       ZeroMQ inproc:// socket (a push moves as much the other way)
// Counters: operations per second and model bytes per second.
//
//   ps_server [--benchmark_repetitions=5]

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "strata.hpp"
#include "strata/ps.hpp"

namespace {
using Model = strata::Sequential<strata::Dense<784, 1024>, strata::Relu, strata::Dense<1024, 1024>, strata::Relu,
                                 strata::Dense<1024, 10>>;

Model const& model() {
  static Model const m(1);
  return m;
}

zmq::message_t request(strata::ps::Partition const& p, strata::ps::Kind kind, std::int64_t step, std::int64_t version,
                       std::span<float const> floats = {}) {
  strata::ps::Header h;
  h.kind = kind;
  h.job = p.fingerprint();
  h.sender = 0;
  h.step = step;
  h.version = version;
  return strata::ps::encode(h, floats);
}

void set_counters(benchmark::State& state, std::size_t floats) {
  state.counters["per_s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["bytes_per_s"] =
      benchmark::Counter(double(state.iterations()) * double(floats * sizeof(float)), benchmark::Counter::kIsRate);
}

template <class Opt>
void server_push(benchmark::State& state, Opt optimizer) {
  strata::ps::Partition const p(Model::parameter_tensors(), 1);
  strata::ps::ShardServer<Opt> server(p, 0, Model::parameter_tensors(), model().parameters(), optimizer, 0);
  std::vector<float> const gradient(p.floats(0), 1e-3f);  // the parameters, without the arena's padding
  std::int64_t step = 0;
  auto push = request(p, strata::ps::Kind::push, 0, 0, gradient);  // made once: the worker's cost, not the server's
  for (auto _ : state) {
    strata::ps::Header h;
    std::memcpy(&h, push.data(), sizeof h);
    h.step = h.version = step;
    std::memcpy(push.data(), &h, sizeof h);
    auto reply = server.handle(push);
    benchmark::DoNotOptimize(reply.data());
    ++step;
  }
  if (server.version() != step) state.SkipWithError("the server did not apply every push");
  set_counters(state, gradient.size());
}

template <class Opt>
void optimizer_alone(benchmark::State& state, Opt optimizer) {
  std::size_t const n = model().parameters().size();
  strata::AlignedBuffer weights(n), gradient(n);  // aligned as a server's storage is
  std::copy(model().parameters().begin(), model().parameters().end(), weights.data());
  std::fill(gradient.data(), gradient.data() + n, 1e-3f);
  auto opt_state = optimizer.make_state(n);
  std::int64_t step = 1;
  for (auto _ : state) {
    optimizer.update(weights.span(), std::span<float const>(gradient.data(), n), opt_state, 0, step++);
    benchmark::DoNotOptimize(weights.data());
  }
  set_counters(state, n);
}

void BM_ServerPushSgd(benchmark::State& state) { server_push(state, strata::Sgd{.lr = 0.01f, .momentum = 0.9f}); }
void BM_ServerPushAdam(benchmark::State& state) { server_push(state, strata::Adam{.lr = 1e-3f}); }
void BM_OptimizerSgd(benchmark::State& state) { optimizer_alone(state, strata::Sgd{.lr = 0.01f, .momentum = 0.9f}); }
void BM_OptimizerAdam(benchmark::State& state) { optimizer_alone(state, strata::Adam{.lr = 1e-3f}); }

void BM_ServerPull(benchmark::State& state) {
  strata::ps::Partition const p(Model::parameter_tensors(), 1);
  strata::ps::ShardServer<strata::Sgd> server(p, 0, Model::parameter_tensors(), model().parameters(), strata::Sgd{}, 0);
  auto const pull = request(p, strata::ps::Kind::pull, -1, 0);
  for (auto _ : state) {
    auto reply = server.handle(pull);
    benchmark::DoNotOptimize(reply.data());
  }
  set_counters(state, model().parameters().size());
}

// A worker's pull through inproc:// from a server thread.
void BM_InprocPull(benchmark::State& state) {
  strata::ps::Partition const p(Model::parameter_tensors(), 1);
  strata::ps::ShardServer<strata::Sgd> server(p, 0, Model::parameter_tensors(), model().parameters(),
                                              strata::Sgd{.lr = 0.01f}, 0);
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.bind("inproc://ps-bench");
  std::atomic<bool> stop{false};
  std::thread serving([&] { server.serve(router, stop); });
  Model worker_model = model();
  strata::ps::Worker<Model, strata::SoftmaxCrossEntropy> worker(context, {"inproc://ps-bench"}, p, worker_model, {}, 1, 0);
  for (auto _ : state) worker.pull();
  stop = true;
  serving.join();
  set_counters(state, model().parameters().size());
}

}  // namespace

BENCHMARK(BM_ServerPushSgd)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ServerPushAdam)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_OptimizerSgd)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_OptimizerAdam)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ServerPull)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_InprocPull)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
