// Fuzz target: ONNX model bytes -> import -> compile (Model::LoadOnnx) -> one run on zeros.
// Seeds: the ONNX test models (make_seeds.py). See README.md.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "engine/engine.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using loopserve::engine::Model;
  auto model = Model::LoadOnnx(absl::string_view(reinterpret_cast<const char*>(data), size),
                               loopserve::fuzz::LoadLimits());
  if (model.ok()) loopserve::fuzz::RunOnZeros(**model);
  return 0;
}
