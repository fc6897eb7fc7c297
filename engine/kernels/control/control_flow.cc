#include "engine/kernels/control/control_flow.h"

namespace loopserve::engine {

void BindCaptures(const Plan& plan, ExecutionFrame& parent, ExecutionFrame& child) {
  for (const Capture& c : plan.graph().captures) {
    const Value& outer = parent.slot(c.outer);
    Value& inner = child.slot(c.inner);
    if (outer.is_tensor()) {
      inner.mutable_tensor() = Tensor::ViewOf(outer.tensor());
    } else {
      inner.CopyFrom(outer);
    }
  }
}

void MoveOut(const Plan& plan, int slot, Value& from, Value& to) {
  if (plan.is_produced(slot) && !(from.is_tensor() && from.tensor().is_view())) {
    swap(from, to);
  } else {
    to.CopyFrom(from);
  }
}

}  // namespace loopserve::engine
