#include "engine/runtime/kernel.h"

#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"

namespace loopserve::engine {

KernelContext::KernelContext(ExecutionFrame& frame, const Step& step, KernelState* state,
                             Value* slots)
    : frame_(frame),
      step_(step),
      state_(state),
      slots_(slots),
      inputs_(step.inputs.data()),
      outputs_(step.outputs.data()),
      num_inputs_(static_cast<int>(step.inputs.size())),
      num_outputs_(static_cast<int>(step.outputs.size())) {}

Tensor* KernelContext::output(int i, DataType dtype, const Shape& shape) {
  Tensor* t = &slots_[outputs_[i]].mutable_tensor();
  // Steady state in a loop body: the slot already owns a buffer of this type and shape, so even
  // the shape copy in Resize is skipped.
  if (t->capacity() > 0 && t->dtype() == dtype && t->shape() == shape) return t;
  t->Resize(dtype, shape);
  return t;
}

Value* KernelContext::TakeInputValue(int in, int out) {
  if (in < 0 || in >= 32 || in >= num_inputs_ || out < 0 || out >= num_outputs_) return nullptr;
  if ((step_.takeable_inputs >> in & 1) == 0 || inputs_[in] < 0) return nullptr;
  Value& src = slots_[inputs_[in]];
  if (src.is_tensor()) {
    if (src.tensor().capacity() == 0) return nullptr;  // a view, or nothing to reuse
  } else if (src.is_sequence()) {
    for (const Tensor& t : src.sequence()) {
      if (t.is_view()) return nullptr;
    }
  } else {
    return nullptr;
  }
  Value& dst = slots_[outputs_[out]];
  swap(src, dst);
  return &dst;
}

Tensor* KernelContext::TakeInput(int in, int out) {
  if (in < 0 || in >= num_inputs_ || inputs_[in] < 0 || !slots_[inputs_[in]].is_tensor()) {
    return nullptr;
  }
  Value* v = TakeInputValue(in, out);
  return v == nullptr ? nullptr : &v->mutable_tensor();
}

RunContext& KernelContext::run_context() { return frame_.context(); }

const Tensor* KernelInit::constant_input(int i) const {
  if (!has_input(i)) return nullptr;
  return context_.FindConstant(node_.inputs[i]);
}

absl::StatusOr<std::shared_ptr<const Plan>> KernelInit::CompileSubgraph(
    std::shared_ptr<const Graph> subgraph) const {
  context_.set_depth(context_.depth() + 1);
  auto plan = Plan::Compile(std::move(subgraph), context_);
  context_.set_depth(context_.depth() - 1);
  return plan;
}

absl::StatusOr<std::shared_ptr<const Plan>> KernelInit::CompileUnfused(
    std::shared_ptr<const Graph> subgraph) const {
  const bool transforms = context_.transforms();
  std::string* dump = context_.dump();
  context_.set_transforms(false);
  // The fallback is an implementation detail of one node: not part of the plan dump.
  context_.set_dump(nullptr);
  auto plan = CompileSubgraph(std::move(subgraph));
  context_.set_transforms(transforms);
  context_.set_dump(dump);
  return plan;
}

int KernelInit::RegisterLoop(const std::string& name) const { return context_.RegisterLoop(name); }

bool KernelInit::top_level() const { return context_.depth() == 0; }

void KernelInit::RegisterScanOutput(int model_output, int loop_index) const {
  context_.RegisterScanOutput(model_output, loop_index);
}

}  // namespace loopserve::engine
