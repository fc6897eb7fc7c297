#include "engine/runtime/frame_pool.h"

#include <utility>

#include "engine/tensor/memory_budget.h"

namespace loopserve::engine {

FramePool::FramePool(const Plan& plan, int max_frames, int64_t max_frame_bytes)
    : plan_(plan), max_frames_(max_frames), max_frame_bytes_(max_frame_bytes) {}

FramePool::~FramePool() {
  // Frames are freed outside any run: their buffers are credited to no budget.
  ScopedMemoryBudget no_budget(nullptr);
  absl::MutexLock lock(&mu_);
  kept_.clear();
}

std::unique_ptr<ExecutionFrame> FramePool::Take(RunContext& context) {
  Kept kept;
  {
    absl::MutexLock lock(&mu_);
    if (!kept_.empty()) {
      kept = std::move(kept_.back());
      kept_.pop_back();
    }
  }
  if (kept.frame == nullptr) return std::make_unique<ExecutionFrame>(plan_, context);
  try {
    context.memory_budget().Charge(static_cast<size_t>(kept.bytes));
  } catch (const MemoryBudgetExceeded&) {
    // This run's budget cannot hold the arena: drop it (crediting nothing) and start afresh, so
    // the run is refused, or not, exactly as it would be without the arena.
    ScopedMemoryBudget no_budget(nullptr);
    kept = Kept();
    return std::make_unique<ExecutionFrame>(plan_, context);
  }
  kept.frame->Rebind(context);
  context.SwapResources(kept.resources);
  return std::move(kept.frame);
}

bool FramePool::Give(std::unique_ptr<ExecutionFrame> frame, RunContext& context,
                     int64_t held_bytes) {
  Kept kept;
  kept.frame = std::move(frame);
  kept.bytes = held_bytes;
  if (held_bytes <= max_frame_bytes_) {
    context.SwapResources(kept.resources);
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(kept_.size()) < max_frames_) {
      kept_.push_back(std::move(kept));
      return true;
    }
  }
  // Dropped: its buffers go back to the heap as they would after a run without the arena.
  return false;
}

int64_t FramePool::held_bytes() const {
  absl::MutexLock lock(&mu_);
  int64_t bytes = 0;
  for (const Kept& kept : kept_) bytes += kept.bytes;
  return bytes;
}

}  // namespace loopserve::engine
