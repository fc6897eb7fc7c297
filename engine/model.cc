#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/engine.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/openvino_importer.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"

namespace loopserve::engine {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("error reading '", path, "'"));
  return buffer.str();
}

// Checks a fed value against the declared type of a graph input.
absl::Status CheckInput(const Value& value, const TensorSpec& spec) {
  const ValueType& type = spec.type;
  const std::string what = absl::StrCat("input '", spec.name, "'");
  if (type.kind == ValueKind::kSequence && !value.is_sequence()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a sequence"));
  }
  if (type.kind == ValueKind::kTensor && !value.is_tensor()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a tensor"));
  }
  if (type.kind == ValueKind::kOptional && value.is_none()) return absl::OkStatus();
  if (!value.is_tensor()) return absl::OkStatus();
  const Tensor& t = value.tensor();
  if (type.dtype != DataType::kUndefined && t.dtype() != type.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected element type ",
                                                   DataTypeName(type.dtype), ", got ",
                                                   DataTypeName(t.dtype())));
  }
  if (type.dims.has_value()) {
    const std::vector<int64_t>& dims = *type.dims;
    bool match = static_cast<int>(dims.size()) == t.rank();
    for (int i = 0; match && i < t.rank(); ++i) {
      if (dims[i] >= 0 && dims[i] != t.dim(i)) match = false;
    }
    if (!match) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", t.shape().ToString(),
                                                     " does not match the declared ",
                                                     type.ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Model>> Model::Load(const std::string& path,
                                                         const LoadOptions& options) {
  if (absl::EndsWith(path, ".onnx")) {
    LS_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
    return LoadOnnx(bytes, options);
  }
  if (absl::EndsWith(path, ".xml")) {
    // The weights are the .bin beside the .xml. A model without constants needs none, so a
    // missing .bin is an error only once a Const layer reads from it.
    LS_ASSIGN_OR_RETURN(std::string xml, ReadFile(path));
    const std::string bin_path = path.substr(0, path.size() - 4) + ".bin";
    absl::StatusOr<std::string> weights = ReadFile(bin_path);
    if (!weights.ok() && !absl::IsNotFound(weights.status())) return weights.status();
    absl::StatusOr<std::shared_ptr<Graph>> graph =
        ImportOpenVinoModel(xml, weights.ok() ? *weights : std::string());
    if (!graph.ok()) return Annotate(graph.status(), absl::StrCat("'", path, "': "));
    return FromGraph(*std::move(graph), options);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", path, "': unknown model format (expected a .onnx file, or a .xml with its .bin)"));
}

absl::StatusOr<std::shared_ptr<const Model>> Model::LoadOnnx(absl::string_view bytes,
                                                             const LoadOptions& options) {
  LS_ASSIGN_OR_RETURN(std::shared_ptr<Graph> graph, ImportOnnxModel(bytes));
  return FromGraph(std::move(graph), options);
}

absl::StatusOr<std::shared_ptr<const Model>> Model::FromGraph(std::shared_ptr<Graph> graph,
                                                              const LoadOptions& options) {
  LS_RETURN_IF_ERROR(SortTopologically(*graph));
  std::shared_ptr<Model> model(new Model());
  for (ValueId v : graph->inputs) {
    model->inputs_.push_back(TensorSpec{graph->values[v].name, graph->values[v].type});
  }
  for (ValueId v : graph->outputs) {
    model->outputs_.push_back(TensorSpec{graph->values[v].name, graph->values[v].type});
  }
  const KernelRegistry& registry = KernelRegistry::Builtin();
  LS_RETURN_IF_ERROR(registry.status());
  CompileContext context(registry);
  LS_ASSIGN_OR_RETURN(model->plan_, Plan::Compile(std::move(graph), context));
  model->loop_names_ = context.loop_names();
  return std::shared_ptr<const Model>(std::move(model));
}

int Model::FindInput(absl::string_view name) const {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Model::FindOutput(absl::string_view name) const {
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (outputs_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<std::vector<Value>> Model::Run(std::vector<Value> inputs, const RunOptions& options,
                                              RunStats* stats) const {
  if (inputs.size() != inputs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", inputs_.size(), " inputs, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) LS_RETURN_IF_ERROR(CheckInput(inputs[i], inputs_[i]));

  RunContext context(options);
  LS_RETURN_IF_ERROR(context.CheckInterrupted());
  ExecutionFrame frame(*plan_, context);
  const Graph& graph = plan_->graph();
  for (size_t i = 0; i < inputs.size(); ++i) swap(frame.slot(graph.inputs[i]), inputs[i]);
  LS_RETURN_IF_ERROR(frame.Run(/*check_interrupts=*/true));

  std::vector<Value> outputs(graph.outputs.size());
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const ValueId id = graph.outputs[i];
    // The caller owns every output: values the frame produced are moved out; views (constants,
    // inputs passed straight through) are copied, and so is an output listed twice.
    size_t first = 0;
    while (graph.outputs[first] != id) ++first;
    Value& v = frame.slot(id);
    if (first < i) {
      outputs[i].CopyFrom(outputs[first]);
    } else if (plan_->is_produced(id) && !(v.is_tensor() && v.tensor().is_view())) {
      swap(outputs[i], v);
    } else {
      outputs[i].CopyFrom(v);
    }
  }
  if (stats != nullptr) *stats = context.stats();
  return outputs;
}

}  // namespace loopserve::engine
