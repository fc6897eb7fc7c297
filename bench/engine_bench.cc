// Google Benchmark suite for the engine through its public face (engine/engine.h): the Loop
// benchmark models (bench/make_bench_models.py) run through Model::Run in process, and the
// per-iteration overhead of a trivial body. Kernel-level micro-benchmarks (oneDNN against native
// loops, the packed one-row matmul) are engine-internal: engine/kernels/kernel_bench.cc.
//
//   build/bin/engine_bench --models=build/bench/bench_models [--threads=1] [benchmark flags]
//
// Each Loop benchmark reports `iter/s` (loop iterations per second); the trivial-body benchmark's
// time per item is the per-iteration cost.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/tools/looprun.h"

namespace loopserve {
namespace {

std::string g_models_dir = "bench_models";

struct Loaded {
  std::shared_ptr<const engine::Model> model;
  std::vector<engine::Value> inputs;
};

Loaded LoadBenchModel(const std::string& name) {
  const std::string folder = g_models_dir + "/" + name;
  Loaded l;
  auto model = engine::Model::Load(folder + "/model.onnx");
  if (!model.ok()) return l;
  auto inputs = tools::ReadInputs(**model, folder + "/test_data_set_0");
  if (!inputs.ok()) return l;
  l.model = *model;
  l.inputs = *std::move(inputs);
  return l;
}

void RunModel(benchmark::State& state, const std::string& name, int64_t trips) {
  Loaded l = LoadBenchModel(name);
  if (l.model == nullptr) {
    state.SkipWithError(("cannot load " + g_models_dir + "/" + name).c_str());
    return;
  }
  if (trips > 0) {  // input 0 is the trip count M
    l.inputs[0].mutable_tensor().mutable_data<int64_t>()[0] = trips;
  }
  engine::RunOptions options;
  int64_t iterations = 0;
  for (auto _ : state) {
    engine::RunStats stats;
    auto out = l.model->Run(tools::ViewInputs(l.inputs), options, &stats);
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      return;
    }
    iterations += stats.loop_iterations;
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(iterations);
}

// Per-iteration overhead of the trivial counter body: time per item at large M.
void BM_CounterPerIteration(benchmark::State& state) { RunModel(state, "counter", state.range(0)); }
BENCHMARK(BM_CounterPerIteration)->Arg(1)->Arg(1000)->Arg(100000)->Unit(benchmark::kMicrosecond);

void BM_Model(benchmark::State& state, const char* name) { RunModel(state, name, 0); }
BENCHMARK_CAPTURE(BM_Model, counter, "counter")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, rnn_b1, "rnn_b1")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, rnn_b16, "rnn_b16")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, greedy, "greedy")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, large_scan, "large_scan")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Model, nested, "nested")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loopserve

int main(int argc, char** argv) {
  loopserve::engine::UsePassiveOpenMpWait(argv);
  int threads = 1;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--models=", 9) == 0) {
      loopserve::g_models_dir = argv[i] + 9;
    } else if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else {
      rest.push_back(argv[i]);
    }
  }
  loopserve::engine::SetIntraOpThreads(threads);
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
