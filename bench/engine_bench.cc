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

#include "bench/bench_model.h"
#include "engine/engine.h"

namespace loopserve {
namespace {

using bench::RunBenchModel;

// Per-iteration overhead of the trivial counter body: time per item at large M.
void BM_CounterPerIteration(benchmark::State& state) {
  RunBenchModel(state, "counter", state.range(0));
}
BENCHMARK(BM_CounterPerIteration)->Arg(1)->Arg(1000)->Arg(100000)->Unit(benchmark::kMicrosecond);

void BM_Model(benchmark::State& state, const char* name) { RunBenchModel(state, name, 0); }
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
      loopserve::bench::ModelsDir() = argv[i] + 9;
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
