#pragma once

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/tensor/memory_budget.h"

namespace loopserve::engine {

// Builds the ResourceExhausted status of an engine limit, with `reason` as its payload (see
// LimitReason in engine/engine.h).
absl::Status LimitExceededError(LimitReason reason, absl::string_view message);

// Per-run state a kernel family keeps beside the generic run context (oneDNN's stream and
// scratchpad live in kernels/dnnl/): created on the family's first use in a run, destroyed with
// the run. Not thread-safe, like the run.
class RunResource {
 public:
  virtual ~RunResource() = default;
};

class RunContext;

// Interruption checks inside one long kernel step. A Loop checks for cancellation and the
// deadline every iteration, but one step that copies or fills a large tensor (Concat, Expand,
// Tile, Pad, ConstantOfShape, ... of hundreds of megabytes) takes long by itself: such kernels
// report their progress here, and every kChunkBytes of output (about a millisecond of copying) the
// pacer checks the run's flags, so a run that must stop frees its worker within about that much
// work instead of at the end of the step. Cheap: a counter between checks. Not thread-safe; one per
// kernel step.
class InterruptPacer {
 public:
  static constexpr size_t kChunkBytes = size_t{4} << 20;

  explicit InterruptPacer(const RunContext& context) : context_(context) {}

  // Counts `bytes` of output produced; every kChunkBytes, checks the run. False when the run must
  // stop (status() says why); the kernel then returns status().
  bool Produced(size_t bytes) {
    pending_ += bytes;
    if (pending_ < kChunkBytes) return true;
    pending_ = 0;
    return Check();
  }

  // memcpy in pieces of kChunkBytes with a check after each; false when interrupted.
  bool Copy(void* dst, const void* src, size_t bytes);

  // Runs `work(begin, end)` over [0, count) in pieces of about kChunkBytes (`bytes_per_unit`
  // bytes of output per unit), checking between pieces; false when interrupted.
  template <typename Work>
  bool ForEachChunk(int64_t count, size_t bytes_per_unit, Work&& work) {
    const int64_t per_chunk = static_cast<int64_t>(
        std::max<size_t>(1, kChunkBytes / std::max<size_t>(1, bytes_per_unit)));
    for (int64_t begin = 0; begin < count; begin += per_chunk) {
      const int64_t end = count - begin > per_chunk ? begin + per_chunk : count;
      work(begin, end);
      if (!Produced(static_cast<size_t>(end - begin) * bytes_per_unit)) return false;
    }
    return true;
  }

  const absl::Status& status() const { return status_; }

 private:
  bool Check();

  const RunContext& context_;
  size_t pending_ = 0;
  absl::Status status_;
};

// The per-request state shared by a run's top-level frame and every nested (Loop/If body) frame:
// options, interrupt checks, the memory budget, statistics and the kernel families' RunResources.
// Not thread-safe: a run executes on one thread. Owned by Model::Run for the duration of the run.
class RunContext {
 public:
  static constexpr int kMaxResources = 4;
  // The kernel families' resources of a run. A kept frame (FramePool) carries them from one run to
  // the next (SwapResources), so a later run reuses them (oneDNN's stream and scratchpad) instead
  // of building them again.
  struct Resources {
    std::unique_ptr<RunResource> slots[kMaxResources];
  };

  explicit RunContext(const RunOptions& options);
  ~RunContext();
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  const RunOptions& options() const { return options_; }
  RunStats& stats() { return stats_; }
  // A number no other RunContext of the process has had (from 1): per-frame state that must act
  // once per run (count a step in the run's statistics) remembers the last run it acted for.
  uint64_t id() const { return id_; }

  // Cancelled or DeadlineExceeded when the run must stop; OK otherwise. Cheap enough to call on
  // every loop iteration: an atomic load and, with a deadline, a read of the coarse monotonic
  // clock (~5 ns through the vDSO, against ~20 ns for absl::Now()). The coarse clock ticks every
  // few milliseconds, so a deadline is noticed at most one tick late.
  absl::Status CheckInterrupted() const {
    if (options_.cancelled != nullptr && options_.cancelled->load(std::memory_order_relaxed)) {
      return CancelledError();
    }
    if (has_deadline_ && CoarseMonotonicNanos() >= deadline_ns_) return DeadlineError();
    return absl::OkStatus();
  }

  MemoryBudget& memory_budget() { return memory_budget_; }

  // CLOCK_MONOTONIC_COARSE in nanoseconds.
  static int64_t CoarseMonotonicNanos() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }

  // The run's resource of type T (a RunResource with a default constructor), created on first
  // use. Each T gets its own slot, numbered once per process; callers on a hot path keep the
  // reference (it stays valid for the run).
  template <typename T>
  T& Resource() {
    static const int slot = NewResourceSlot();
    std::unique_ptr<RunResource>& r = resources_.slots[slot];
    if (r == nullptr) r = std::make_unique<T>();
    return static_cast<T&>(*r);
  }

  // Exchanges this run's resources with `kept`.
  void SwapResources(Resources& kept) {
    for (int i = 0; i < kMaxResources; ++i) resources_.slots[i].swap(kept.slots[i]);
  }

 private:
  // Hands out resource slots 0, 1, ...; aborts past kMaxResources (a build-time mistake: one slot
  // per kernel family that needs one).
  static int NewResourceSlot();

  absl::Status CancelledError() const;
  absl::Status DeadlineError() const;

  RunOptions options_;
  uint64_t id_;
  bool has_deadline_;
  int64_t deadline_ns_ = 0;  // options_.deadline on the CoarseMonotonicNanos() clock
  RunStats stats_;
  MemoryBudget memory_budget_;
  Resources resources_;
};

}  // namespace loopserve::engine
