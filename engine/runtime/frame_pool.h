#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/run_context.h"

namespace loopserve::engine {

// The per-model arena: top-level execution frames of one plan kept across runs, each with every
// buffer its slots own, its kernels' states (Loop and If bodies' frames, oneDNN memory bindings,
// gathered indices) and its last run's RunResources (oneDNN's stream and scratchpad). A
// steady-state run of a fixed-shape model reuses all of it: no tensor buffer is allocated (and no
// page faulted in) but the outputs handed to the caller. With dynamic shapes a slot's buffer
// grows to the largest shape it has held (Tensor::Resize never shrinks), like a per-value cache
// keyed by nothing, which needs no planning and stays right when a Loop body's shapes change
// from one iteration to the next.
//
// A run takes a frame (Take) and, when it succeeds, gives it back (Give) with the bytes it now
// holds; a failed run's frame is dropped (a kernel's state may be half-updated). The memory
// budget still sees the arena: Take charges a kept frame's bytes to the run's budget before the
// run starts, and a budget too small for them gets a fresh frame instead (whose allocations are
// charged as they happen, so an over-budget model is refused as it was without the arena). At
// most `max_frames` frames are kept (one per concurrent run: more runs at once make frames of
// their own and drop them), none holding more than `max_frame_bytes`. Thread-safe; the plan
// must outlive the pool.
class FramePool {
 public:
  FramePool(const Plan& plan, int max_frames, int64_t max_frame_bytes);
  ~FramePool();
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;

  // A frame for one run on `context`: a kept one, bound to the context, its bytes charged to the
  // context's budget and its resources moved into the context; or a new frame.
  std::unique_ptr<ExecutionFrame> Take(RunContext& context);

  // Keeps `frame` after a successful run on `context` (taking the context's resources with it)
  // when there is room; `held_bytes` is what its buffers hold now. Drops it otherwise. Call on
  // the thread that ran it, after ExecutionFrame::ReleaseRequestValues. True when kept.
  bool Give(std::unique_ptr<ExecutionFrame> frame, RunContext& context, int64_t held_bytes);

  // Bytes the kept frames hold (the arena's size).
  int64_t held_bytes() const;

 private:
  struct Kept {
    std::unique_ptr<ExecutionFrame> frame;
    RunContext::Resources resources;
    int64_t bytes = 0;
  };

  const Plan& plan_;
  const int max_frames_;
  const int64_t max_frame_bytes_;
  mutable absl::Mutex mu_;
  std::vector<Kept> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loopserve::engine
