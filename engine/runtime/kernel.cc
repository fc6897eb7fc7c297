#include "engine/runtime/kernel.h"

#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"

namespace loopserve::engine {

int KernelContext::num_inputs() const { return static_cast<int>(step_.inputs.size()); }
int KernelContext::num_outputs() const { return static_cast<int>(step_.outputs.size()); }

bool KernelContext::has_input(int i) const {
  return i >= 0 && i < num_inputs() && step_.inputs[i] >= 0;
}

const Value& KernelContext::input_value(int i) const { return frame_.slot(step_.inputs[i]); }

Tensor* KernelContext::output(int i, DataType dtype, const Shape& shape) {
  Tensor* t = &frame_.slot(step_.outputs[i]).mutable_tensor();
  t->Resize(dtype, shape);
  return t;
}

Value& KernelContext::output_value(int i) { return frame_.slot(step_.outputs[i]); }

RunContext& KernelContext::run_context() { return frame_.context(); }

const Tensor* KernelInit::constant_input(int i) const {
  if (!has_input(i)) return nullptr;
  const ValueId v = node_.inputs[i];
  for (const auto& [id, tensor] : graph_.constants) {
    if (id == v) return tensor.get();
  }
  return nullptr;
}

absl::StatusOr<std::shared_ptr<const Plan>> KernelInit::CompileSubgraph(
    std::shared_ptr<const Graph> subgraph) const {
  context_.set_depth(context_.depth() + 1);
  auto plan = Plan::Compile(std::move(subgraph), context_);
  context_.set_depth(context_.depth() - 1);
  return plan;
}

int KernelInit::RegisterLoop(const std::string& name) const { return context_.RegisterLoop(name); }

}  // namespace loopserve::engine
