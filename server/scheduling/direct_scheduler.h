#pragma once

#include <memory>

#include "absl/status/status.h"
#include "server/scheduling/scheduler.h"
#include "server/scheduling/worker_pool.h"

namespace loopserve::server {

// The default scheduler: every call runs alone, as soon as it can. On the caller's thread when
// the version's recent runs averaged under Executor::inline_run_limit and the pool would start it
// at once (WorkerPool::TryRunHere; a streamed call never: its client's reads pace its run),
// otherwise on the WorkerPool (full queue: RESOURCE_EXHAUSTED at once, so a protocol thread never
// blocks). `instances` (may be null) caps the version's runs at once. Thread-safe; holds no
// queue of its own (the pool's is the queue), so Flush has nothing to do.
class DirectScheduler : public Scheduler {
 public:
  explicit DirectScheduler(std::shared_ptr<TaskGroup> instances);

  absl::Status Enqueue(ScheduledCall& call, Executor& executor) override;
  void Flush() override {}
  Stats stats() const override { return {}; }

  // Enqueue with the recent-run estimate of `timing` (the DynamicBatcher sends its streamed
  // calls here, timed by its own estimate).
  absl::Status Dispatch(ScheduledCall& call, Executor& executor, const Scheduler& timing);

 private:
  const std::shared_ptr<TaskGroup> instances_;
};

}  // namespace loopserve::server
