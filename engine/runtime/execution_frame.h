#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/recycled_buffers.h"
#include "engine/runtime/run_context.h"
#include "engine/tensor/value.h"

namespace loopserve::engine {

// The mutable state of one execution of a Plan: a Value per slot and each kernel's KernelState.
// The top-level graph's frames are kept by the model across requests (FramePool, the per-model
// arena), one per concurrent run; a Loop or If kernel keeps one frame per body in its own
// KernelState and reuses it across iterations and requests. That reuse is what keeps steady-state
// runs and iterations free of allocation: every slot keeps its buffer, every kernel its state.
// Constants are bound as views of the plan's tensors on construction; the owner binds inputs and
// captures (SetInput/BindCapture) before Run. Not thread-safe. The plan must outlive the frame,
// and the RunContext it is bound to (construction or Rebind) every run of it.
class ExecutionFrame {
 public:
  ExecutionFrame(const Plan& plan, RunContext& context);
  ~ExecutionFrame();
  ExecutionFrame(const ExecutionFrame&) = delete;
  ExecutionFrame& operator=(const ExecutionFrame&) = delete;

  const Plan& plan() const { return plan_; }
  RunContext& context() { return *context_; }
  // Binds the frame to another run's context (a kept frame's next request; a body frame's next
  // execution, which may belong to another request).
  void Rebind(RunContext& context) { context_ = &context; }

  Value& slot(int i) { return slots_[i]; }
  const Value& slot(int i) const { return slots_[i]; }

  // Runs every step in order. Errors carry the failing node's label. With `check_interrupts`, the
  // run's cancellation flag and deadline are checked before each step.
  absl::Status Run(bool check_interrupts = false);

  KernelState* state(int step_index) { return states_[step_index].get(); }

  // Drops what refers to the finished request, so that a kept frame holds only its own buffers:
  // the graph inputs' values (the caller's tensors, or views of its memory) and every produced
  // slot that is a view (of an input, say). Produced slots that own buffers keep them.
  void ReleaseRequestValues();

 private:
  // Before a step: gives each of its output slots that has no buffer the best-fitting recycled
  // one at least as large as the buffer it released last time (so kernels that size their
  // outputs any way they like find it). After a step: recycles the step's releases.
  void TakeRecycled(const Step& step);
  void Recycle(const Step& step);

  const Plan& plan_;
  RunContext* context_;
  std::vector<Value> slots_;
  // Liveness-based reuse: buffers of values no later step reads (Step::releases), free for the
  // outputs of later steps, and per slot the capacity its buffer had when it was released (0:
  // never released). In steady state the same sizes change hands the same way every run.
  RecycledBuffers recycled_;
  std::vector<size_t> released_capacity_;
  // Created with the frame (not on first use), so a step's state is one load on the hot path.
  std::vector<std::unique_ptr<KernelState>> states_;
};

}  // namespace loopserve::engine
