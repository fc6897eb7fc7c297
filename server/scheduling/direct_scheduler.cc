#include "server/scheduling/direct_scheduler.h"

#include <utility>

namespace loopserve::server {

DirectScheduler::DirectScheduler(std::shared_ptr<TaskGroup> instances)
    : instances_(std::move(instances)) {}

absl::Status DirectScheduler::Enqueue(ScheduledCall& call, Executor& executor) {
  return Dispatch(call, executor, *this);
}

absl::Status DirectScheduler::Dispatch(ScheduledCall& call, Executor& executor,
                                       const Scheduler& timing) {
  WorkerPool& pool = executor.pool();
  // A streamed run waits for its client's reads: never on the protocol's thread.
  if (!call.streamed() && timing.recent_run() < executor.inline_run_limit() &&
      pool.TryRunHere(
          [&] {
            executor.WatchWhileHere(call);
            executor.RunHere(call);  // `call` may be gone after this
          },
          instances_)) {
    return absl::OkStatus();
  }
  // Queued before in flight: a request seen in flight and not queued is running.
  executor.Queued(call);
  absl::Status scheduled =
      pool.TrySchedule([&executor, &call] { executor.RunAlone(call); }, instances_);
  if (!scheduled.ok()) executor.Unqueued(call);
  return scheduled;
}

}  // namespace loopserve::server
