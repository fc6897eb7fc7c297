#include "engine/runtime/node_evaluator.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/run_context.h"

namespace loopserve::engine {

absl::StatusOr<std::vector<Tensor>> EvaluateNode(const KernelRegistry& registry, const Node& node,
                                                 const std::vector<const Tensor*>& inputs) {
  if (inputs.size() != node.inputs.size()) {
    return absl::InternalError(absl::StrCat(node.Label(), ": evaluated on ", inputs.size(),
                                            " inputs, the node has ", node.inputs.size()));
  }
  auto graph = std::make_shared<Graph>();
  graph->name = absl::StrCat(node.name, "/evaluate");
  Node copy = node;
  copy.implicit_inputs.clear();
  std::vector<ValueId> bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (node.inputs[i] == kNoValue || inputs[i] == nullptr) {
      copy.inputs[i] = kNoValue;
      continue;
    }
    ValueType type;
    type.dtype = inputs[i]->dtype();
    type.dims =
        std::vector<int64_t>(inputs[i]->shape().dims().begin(), inputs[i]->shape().dims().end());
    copy.inputs[i] = graph->AddValue(absl::StrCat("in", i), type);
    graph->inputs.push_back(copy.inputs[i]);
    bound.push_back(static_cast<ValueId>(i));
  }
  for (size_t i = 0; i < copy.outputs.size(); ++i) {
    if (copy.outputs[i] == kNoValue) continue;
    copy.outputs[i] = graph->AddValue(absl::StrCat("out", i));
    graph->outputs.push_back(copy.outputs[i]);
  }
  graph->nodes.push_back(std::move(copy));
  CompileContext compile(registry);
  compile.set_transforms(false);
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, Plan::Compile(graph, compile));
  RunContext context{RunOptions{}};
  ExecutionFrame frame(*plan, context);
  const Node& compiled = plan->graph().nodes[0];
  for (ValueId i : bound) {
    frame.slot(compiled.inputs[i]).mutable_tensor() = Tensor::ViewOf(*inputs[i]);
  }
  LS_RETURN_IF_ERROR(frame.Run());
  std::vector<Tensor> outputs(compiled.outputs.size());
  for (size_t i = 0; i < compiled.outputs.size(); ++i) {
    if (compiled.outputs[i] == kNoValue) continue;
    const Value& value = frame.slot(compiled.outputs[i]);
    if (!value.is_tensor()) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Label(), ": output ", i, " is not a tensor"));
    }
    outputs[i].CopyFrom(value.tensor());
  }
  return outputs;
}

}  // namespace loopserve::engine
