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
#include "engine/tensor/memory_budget.h"

namespace dnnl {
class stream;
}

namespace loopserve::engine {

// Receives one call per finished Loop execution (nested loops: one per inner execution). Called on
// the thread running the request; implementations must be thread-safe across requests.
class LoopObserver {
 public:
  virtual ~LoopObserver() = default;
  // `loop_index` indexes Model::loop_names(). `iterations` is how many times the body ran.
  virtual void OnLoopFinished(int loop_index, int64_t iterations, absl::Duration elapsed) = 0;
};

// What the caller of Model::Run controls about one run.
struct RunOptions {
  absl::Time deadline = absl::InfiniteFuture();
  // Set to true (from any thread) to stop the run; checked before every step of the top-level
  // graph and every Loop iteration. Not owned; must outlive the run.
  const std::atomic<bool>* cancelled = nullptr;
  // Largest number of iterations any single Loop execution may run; 0 means no limit. A loop that
  // would run more fails with ResourceExhausted.
  int64_t max_loop_iterations = 0;
  // Largest size in bytes a Loop's concatenated (scan) output may reach; 0 means no limit. A loop
  // whose output would grow past it fails with ResourceExhausted before the buffer grows.
  int64_t max_output_bytes = 0;
  // Largest number of tensor bytes the run may hold at once (MemoryBudget: inputs it was given
  // are not counted, everything it allocates is); 0 means no limit. A run that would allocate
  // past it fails with ResourceExhausted (LimitReason::kMemory) before the allocation.
  int64_t max_memory_bytes = 0;
  LoopObserver* loop_observer = nullptr;  // not owned; may be null
};

// Which engine limit stopped a run. Attached to the ResourceExhausted status as a payload (it
// survives Annotate), so callers can tell limits apart without parsing messages, and an
// out-of-memory ResourceExhausted is not mistaken for either.
enum class LimitReason : uint8_t { kNone, kIterationCap, kOutputBytes, kMemory };
absl::Status LimitExceededError(LimitReason reason, absl::string_view message);
LimitReason GetLimitReason(const absl::Status& status);

// Statistics one run collects; returned by Model::Run.
struct RunStats {
  int64_t loop_executions = 0;
  int64_t loop_iterations = 0;
  int64_t peak_memory_bytes = 0;  // most tensor bytes the run held at once (MemoryBudget::peak)
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
// options, interrupt checks, the memory budget, the oneDNN stream, a scratchpad and statistics.
// Not thread-safe: a run executes on one thread. Owned by Model::Run for the duration of the run.
class RunContext {
 public:
  explicit RunContext(const RunOptions& options);
  ~RunContext();
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  const RunOptions& options() const { return options_; }
  RunStats& stats() { return stats_; }

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

  // The oneDNN CPU stream of this run, created on first use.
  dnnl::stream& stream();

  // A 64-byte aligned buffer of at least `bytes`, valid until the next call with a larger size.
  // For oneDNN user-managed scratchpads.
  void* Scratchpad(size_t bytes);

 private:
  absl::Status CancelledError() const;
  absl::Status DeadlineError() const;

  RunOptions options_;
  bool has_deadline_;
  int64_t deadline_ns_ = 0;  // options_.deadline on the CoarseMonotonicNanos() clock
  RunStats stats_;
  MemoryBudget memory_budget_;
  std::unique_ptr<dnnl::stream> stream_;
  void* scratchpad_ = nullptr;
  size_t scratchpad_bytes_ = 0;
};

}  // namespace loopserve::engine
