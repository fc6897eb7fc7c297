// Fuzz target: config.pbtxt text -> ParseModelConfig (Triton's ModelConfig text format and the
// checks that need no model) -> CompleteModelConfig against a small Loop model (declared tensors
// checked against the model, auto-complete) -> ModelIo::Build (per-tensor checks and reshapes).

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "engine/engine.h"
#include "engine/ir/graph.h"
#include "server/repository/model_config.h"

namespace {

// counter: M (int64 scalar) and start (int64 [1]) -> final (int64 [1]), counts (int64 [M]).
std::shared_ptr<const loopserve::engine::Model> Model() {
  // The example model's ONNX bytes are generated at build time by Python, so the fuzzer builds an
  // equivalent engine graph here: two inputs and two outputs of the types the configs name.
  using loopserve::engine::DataType;
  using loopserve::engine::Graph;
  using loopserve::engine::ValueKind;
  using loopserve::engine::ValueType;
  auto graph = std::make_shared<Graph>();
  auto add = [&](const char* name, DataType dtype, std::vector<int64_t> dims) {
    ValueType type;
    type.kind = ValueKind::kTensor;
    type.dtype = dtype;
    type.dims = std::move(dims);
    return graph->AddValue(name, type);
  };
  const auto x = add("x", DataType::kFloat32, {-1, 2});
  const auto m = add("M", DataType::kInt64, {});
  graph->inputs = {x, m};
  graph->outputs = {x, m};
  auto model = loopserve::engine::Model::FromGraph(graph);
  return model.ok() ? *model : nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::shared_ptr<const loopserve::engine::Model> model = Model();
  auto parsed = loopserve::server::ParseModelConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size), "m");
  if (!parsed.ok() || model == nullptr) return 0;
  auto complete = loopserve::server::CompleteModelConfig(*parsed, *model, "model.onnx",
                                                         loopserve::server::CompletionOptions());
  if (!complete.ok()) return 0;
  (void)loopserve::server::ModelIo::Build(*complete, *model);
  return 0;
}
