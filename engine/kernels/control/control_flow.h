#pragma once

#include <memory>

#include "engine/runtime/execution_frame.h"
#include "engine/runtime/kernel.h"

namespace loopserve::engine {

// Helpers shared by the control-flow kernels (Loop, If).

// A subgraph's frame, kept in the owning kernel's per-frame state so that it (and every buffer
// its slots own) is reused across iterations and executions, also of later requests when the
// enclosing frame is kept (FramePool).
struct SubgraphFrame {
  std::unique_ptr<ExecutionFrame> frame;

  // The frame, bound to `context` (the current run's).
  ExecutionFrame& Get(const Plan& plan, RunContext& context) {
    if (frame == nullptr) {
      frame = std::make_unique<ExecutionFrame>(plan, context);
    } else {
      frame->Rebind(context);
    }
    return *frame;
  }
};

// Binds the subgraph's captures to the parent frame's values: tensors as views (no copy; the
// parent's values do not change while the subgraph runs), sequences by copy.
void BindCaptures(const Plan& plan, ExecutionFrame& parent, ExecutionFrame& child);

// Moves (or, for views and values the body did not produce, copies) `from` into `to`. The body
// slot keeps `to`'s old buffer for reuse.
void MoveOut(const Plan& plan, int slot, Value& from, Value& to);

// The compiled body of a Loop kernel (the LoopStepper runs it row by row); null when `kernel` is
// not a Loop.
const Plan* LoopBodyPlan(const Kernel& kernel);

}  // namespace loopserve::engine
