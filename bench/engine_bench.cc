// Google Benchmark suite for the engine: the Loop benchmark models (bench/make_bench_models.py)
// run through Model::Run in process, the per-iteration overhead of a trivial body, and the
// oneDNN-against-native crossover for small elementwise ops that decides which kernel a tiny
// body op uses.
//
//   build/bin/engine_bench --models=build/bench/bench_models [--threads=1] [benchmark flags]
//
// Each Loop benchmark reports `iter/s` (loop iterations per second); the trivial-body benchmark's
// time per item is the per-iteration cost.

#include <benchmark/benchmark.h>

#include <cstring>
#include <dnnl.hpp>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/runtime/dnnl_util.h"
#include "engine/runtime/threading.h"
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

// The crossover between a oneDNN binary primitive (execute floor ~0.2 us, plus its internal heap
// allocations) and a plain loop, for an f32 add of n elements.
void BM_DnnlAdd(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  const dnnl::memory::desc d({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  const dnnl::engine& eng = engine::CpuEngine();
  dnnl::binary prim(
      dnnl::binary::primitive_desc(dnnl::binary::desc(dnnl::algorithm::binary_add, d, d, d), eng));
  dnnl::memory ma(d, eng, a.data()), mb(d, eng, b.data()), mc(d, eng, c.data());
  dnnl::stream s(eng);
  const dnnl_exec_arg_t args[] = {
      {DNNL_ARG_SRC_0, ma.get()}, {DNNL_ARG_SRC_1, mb.get()}, {DNNL_ARG_DST, mc.get()}};
  for (auto _ : state) {
    dnnl_primitive_execute(prim.get(), s.get(), 3, args);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_DnnlAdd)->RangeMultiplier(4)->Range(1, 16384);

void BM_NativeAdd(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  for (auto _ : state) {
    const float* pa = a.data();
    const float* pb = b.data();
    float* pc = c.data();
    for (int64_t i = 0; i < n; ++i) pc[i] = pa[i] + pb[i];
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_NativeAdd)->RangeMultiplier(4)->Range(1, 16384);

}  // namespace
}  // namespace loopserve

int main(int argc, char** argv) {
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
