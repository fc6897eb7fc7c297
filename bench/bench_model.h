// Runs one of the generated benchmark models (bench/make_bench_models.py) under Google Benchmark:
// shared by bench/engine_bench.cc and engine/kernels/kernel_bench.cc. Header-only; each benchmark
// program sets bench::ModelsDir() from its --models= flag before running.

#ifndef LOOPSERVE_BENCH_BENCH_MODEL_H_
#define LOOPSERVE_BENCH_BENCH_MODEL_H_

#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/tools/looprun.h"

namespace loopserve::bench {

// The folder holding <name>/model.onnx and <name>/test_data_set_0 (default "bench_models").
inline std::string& ModelsDir() {
  static std::string dir = "bench_models";
  return dir;
}

struct BenchModel {
  std::shared_ptr<const engine::Model> model;  // null when the model or its inputs did not load
  std::vector<engine::Value> inputs;
};

inline BenchModel LoadBenchModel(const std::string& name) {
  const std::string folder = ModelsDir() + "/" + name;
  BenchModel l;
  auto model = engine::Model::Load(folder + "/model.onnx");
  if (!model.ok()) return l;
  auto inputs = tools::ReadInputs(**model, folder + "/test_data_set_0");
  if (!inputs.ok()) return l;
  l.model = *model;
  l.inputs = *std::move(inputs);
  return l;
}

// Times whole runs of model `name`; `trips` > 0 replaces its trip count (input 0, M). Items
// processed are Loop iterations.
inline void RunBenchModel(benchmark::State& state, const std::string& name, int64_t trips) {
  BenchModel l = LoadBenchModel(name);
  if (l.model == nullptr) {
    state.SkipWithError(("cannot load " + ModelsDir() + "/" + name).c_str());
    return;
  }
  if (trips > 0) l.inputs[0].mutable_tensor().mutable_data<int64_t>()[0] = trips;
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

}  // namespace loopserve::bench

#endif  // LOOPSERVE_BENCH_BENCH_MODEL_H_
