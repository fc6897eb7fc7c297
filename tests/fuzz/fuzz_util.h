#pragma once

// What the fuzz targets share: running a loaded model on small made-up inputs under tight limits,
// so that fuzzed graphs exercise the kernels too without hanging or exhausting the fuzzer.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "engine/engine.h"

namespace loopserve::fuzz {

// Limits every fuzzed load and run gets: far below libFuzzer's -rss_limit_mb.
inline constexpr int64_t kMemoryBytes = int64_t{64} << 20;
inline constexpr int64_t kLoopIterations = 1000;
inline constexpr absl::Duration kRunTime = absl::Milliseconds(100);

inline engine::LoadOptions LoadLimits() {
  engine::LoadOptions options;
  options.max_memory_bytes = kMemoryBytes;
  return options;
}

inline engine::RunOptions RunLimits() {
  engine::RunOptions options;
  options.deadline = absl::Now() + kRunTime;
  options.max_loop_iterations = kLoopIterations;
  options.max_output_bytes = kMemoryBytes;
  options.max_memory_bytes = kMemoryBytes;
  return options;
}

// Runs `model` once on zero-filled inputs when every input is a tensor whose known dims are
// small (unknown dims are 1); errors are expected and ignored, crashes are what the fuzzer finds.
inline void RunOnZeros(const engine::Model& model) {
  std::vector<engine::Value> inputs;
  for (const engine::TensorSpec& spec : model.inputs()) {
    if (spec.type.kind != engine::ValueKind::kTensor ||
        spec.type.dtype == engine::DataType::kUndefined) {
      return;
    }
    engine::Shape::Dims dims;
    int64_t elements = 1;
    if (spec.type.dims.has_value()) {
      for (int64_t d : *spec.type.dims) {
        const int64_t dim = d < 0 ? 1 : d;
        if (dim > 4096 || elements * (dim == 0 ? 1 : dim) > 4096) return;
        elements *= dim == 0 ? 1 : dim;
        dims.push_back(dim);
      }
    }
    engine::Tensor tensor(spec.type.dtype, engine::Shape(std::move(dims)));
    if (tensor.ByteSize() > 0) std::memset(tensor.mutable_raw_data(), 0, tensor.ByteSize());
    inputs.emplace_back(std::move(tensor));
  }
  (void)model.Run(std::move(inputs), RunLimits());
}

}  // namespace loopserve::fuzz
