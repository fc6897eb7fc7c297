#include "server/scheduling/dynamic_batcher.h"

#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/observability/logging.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

// Runs `body`; an exception it throws is logged, never passed on (past this point the caller
// must not answer the calls involved again).
template <typename Body>
void CatchAndLog(Body&& body) {
  const absl::Status status = CatchExceptions("inference: ", [&] {
    body();
    return absl::OkStatus();
  });
  if (!status.ok()) LogError(std::string(status.message()));
}

}  // namespace

DynamicBatcher::DynamicBatcher(BatchingPolicy policy, int max_collectors,
                               std::shared_ptr<TaskGroup> instances, std::string label,
                               const Clock& clock)
    : instances_(std::move(instances)),
      label_(std::move(label)),
      clock_(clock),
      direct_(instances_),
      queue_(std::move(policy), max_collectors) {}

absl::Status DynamicBatcher::Enqueue(ScheduledCall& call, Executor& executor) {
  // A streamed call runs alone, on a worker.
  if (call.streamed()) return direct_.Dispatch(call, executor, *this);
  const bool short_runs = recent_run() < executor.inline_run_limit();
  // A run on this thread holds this call's client only through the executor's watch (gRPC
  // reports a cancel after the handler returns). Set while the call is ours.
  if (short_runs) executor.WatchWhileHere(call);
  // A lone client's request (its version quiet, nothing queued or collecting) with a short run
  // goes on this thread at once, as unbatched requests do (no hand-off). It holds a collector
  // slot meanwhile, so requests that arrive queue up and merge.
  bool alone = false;
  {
    absl::MutexLock lock(&mutex_);
    const absl::Time now = clock_.Now();
    const bool busy = !queue_.empty() || collectors_ > 0;
    if (busy) queue_.NoteBusy(now);
    alone = short_runs && !busy && queue_.Quiet(now);
    if (alone) {
      ++collectors_;
      queue_.StartRunning(call.batch_size());
    }
  }
  if (alone && RunAlone(call, executor)) return absl::OkStatus();
  // The pool is busy: the call queues in the slot it holds, for a worker collector.
  return Queue(call, executor, /*holds_slot=*/alone, short_runs);
}

bool DynamicBatcher::RunAlone(ScheduledCall& call, Executor& executor) {
  const int64_t rows = call.batch_size();  // `call` may be gone after its run
  if (!executor.pool().TryRunHere([&] { executor.RunHere(call); }, instances_)) return false;
  bool start_collector = false;
  {
    absl::MutexLock lock(&mutex_);
    queue_.StopRunning(rows);
    ReleaseCollector();
    start_collector = !queue_.empty() && !waiting_ && collectors_ < queue_.max_collectors();
    if (start_collector) ++collectors_;
  }
  if (start_collector) StartCollector(executor);
  return true;
}

absl::Status DynamicBatcher::Queue(ScheduledCall& call, Executor& executor, bool holds_slot,
                                   bool short_runs) {
  WorkerPool& pool = executor.pool();
  executor.Queued(call);
  bool start_collector = holds_slot;
  {
    absl::MutexLock lock(&mutex_);
    if (holds_slot) queue_.StopRunning(call.batch_size());
    if (static_cast<int>(queue_.size()) >= pool.max_queue_size()) {
      if (holds_slot) ReleaseCollector();
      executor.Unqueued(call);
      return absl::ResourceExhaustedError(absl::StrCat(
          label_, "the batch queue holds ", queue_.size(), " requests already (--max_queue_size)"));
    }
    queue_.Push(&call, clock_.Now());
    if (holds_slot) {
      // The slot taken in Enqueue goes to a worker collector.
    } else if (waiting_) {
      more_.Signal();
    } else if (collectors_ < queue_.max_collectors()) {
      ++collectors_;
      start_collector = true;
    }
  }
  if (!start_collector) return absl::OkStatus();
  // A free collector slot: for a version of short runs, this thread sends the batch when one is
  // due now (with `call` in it, or `call` left for the next collector) rather than waking a
  // worker; a batch still to be gathered goes to a worker collector, which waits for it.
  // `call` is the queue's from here on: nothing thrown may reach the caller, which would answer
  // it again.
  if (!holds_slot && short_runs &&
      pool.TryRunHere([&] { CatchAndLog([&] { CollectOnce(executor); }); }, instances_)) {
    return absl::OkStatus();
  }
  StartCollector(executor);  // may answer `call` (the pool refused)
  return absl::OkStatus();
}

void DynamicBatcher::CollectOnce(Executor& executor) {
  std::vector<ScheduledCall*> batch, expired;
  Formed formed;
  bool helper = false;
  {
    absl::MutexLock lock(&mutex_);
    formed = FormBatch(batch, expired, executor, /*may_wait=*/false);
    if (formed == Formed::kIdle) ReleaseCollector();
    if (formed == Formed::kBatch) helper = TakeSpareCollector();
  }
  if (helper) StartCollector(executor);
  for (ScheduledCall* call : expired) executor.RunAlone(*call);
  if (formed == Formed::kWait) {
    StartCollector(executor);  // the slot moves to a worker, which waits for the batch to fill
    return;
  }
  const int64_t rows = BatchRows(batch);
  if (!batch.empty()) executor.RunMerged(batch);
  if (formed == Formed::kIdle) return;
  bool more = false;
  {
    absl::MutexLock lock(&mutex_);
    BatchDone(rows);
    more = !queue_.empty();
    if (!more) ReleaseCollector();
  }
  if (more) StartCollector(executor);  // the slot moves to a worker
}

int64_t DynamicBatcher::BatchRows(const std::vector<ScheduledCall*>& batch) {
  int64_t rows = 0;
  for (const ScheduledCall* call : batch) rows += call->batch_size();
  return rows;
}

bool DynamicBatcher::TakeSpareCollector() {
  if (queue_.empty() || waiting_ || collectors_ >= queue_.max_collectors()) return false;
  ++collectors_;
  return true;
}

void DynamicBatcher::BatchDone(int64_t rows) {
  queue_.StopRunning(rows);
  if (waiting_) more_.Signal();  // its share, or how long it gathers, changed
}

void DynamicBatcher::ReleaseCollector() {
  --collectors_;
  if (waiting_) more_.Signal();
}

void DynamicBatcher::StartCollector(Executor& executor) {
  // Whatever happens (a full pool, an allocation that fails), the slot is not lost.
  std::shared_ptr<DynamicBatcher> self = shared_from_this();
  const absl::Status scheduled = CatchExceptions(label_, [&] {
    return executor.pool().TrySchedule([self, &executor] { self->CollectBatches(executor); },
                                       instances_);
  });
  if (scheduled.ok()) return;
  // No collector for the slot taken: when none is left at all, nobody would take the calls
  // queued, so they are answered with the pool's error here.
  std::deque<ScheduledCall*> orphans;
  {
    absl::MutexLock lock(&mutex_);
    ReleaseCollector();
    if (collectors_ == 0) orphans = queue_.TakeAll();
  }
  for (ScheduledCall* orphan : orphans) executor.Reject(*orphan, scheduled);
}

void DynamicBatcher::CollectBatches(Executor& executor) {
  std::vector<ScheduledCall*> batch, expired;
  while (true) {
    batch.clear();
    expired.clear();
    bool idle = false;
    bool helper = false;
    {
      absl::MutexLock lock(&mutex_);
      idle = FormBatch(batch, expired, executor, /*may_wait=*/true) == Formed::kIdle;
      if (idle) ReleaseCollector();
      if (!idle) helper = TakeSpareCollector();
    }
    if (helper) StartCollector(executor);
    // RunAlone answers these DEADLINE_EXCEEDED / CANCELLED.
    for (ScheduledCall* call : expired) executor.RunAlone(*call);
    const int64_t rows = BatchRows(batch);
    if (!batch.empty()) executor.RunMerged(batch);
    if (idle) return;
    {
      absl::MutexLock lock(&mutex_);
      BatchDone(rows);
    }
    // Other models' tasks wait: queue behind them (this task's collector slot moves along).
    WorkerPool& pool = executor.pool();
    if (pool.queue_size() > 0 &&
        CatchExceptions(label_, [&] {
          return pool.TrySchedule(
              [self = shared_from_this(), &executor] { self->CollectBatches(executor); },
              instances_);
        }).ok()) {
      return;
    }
  }
}

DynamicBatcher::Formed DynamicBatcher::FormBatch(std::vector<ScheduledCall*>& batch,
                                                 std::vector<ScheduledCall*>& expired,
                                                 const MergeRule& rule, bool may_wait) {
  BatchQueue::Gathering gathering(queue_);
  queue_.Sweep(clock_.Now(), expired);
  while (true) {
    const BatchQueue::Verdict verdict = queue_.Look(gathering, clock_.Now(), recent_run(), rule);
    if (verdict.step == BatchQueue::Step::kIdle) return Formed::kIdle;
    if (verdict.step == BatchQueue::Step::kWait) {
      if (!may_wait) return Formed::kWait;
      // One collector waits for a batch to fill; another gives its slot back (the waiting one
      // takes these calls).
      if (waiting_) return Formed::kIdle;
      waiting_ = true;
      const bool timed_out = more_.WaitWithDeadline(&mutex_, verdict.due);
      waiting_ = false;
      if (timed_out) queue_.Sweep(clock_.Now(), expired);  // a deadline may have come
      continue;
    }
    if (queue_.Take(gathering, clock_.Now(), batch, expired)) return Formed::kBatch;
  }
}

void DynamicBatcher::Flush() {
  absl::MutexLock lock(&mutex_);
  queue_.Flush();
  if (waiting_) more_.Signal();
}

Scheduler::Stats DynamicBatcher::stats() const {
  absl::MutexLock lock(&mutex_);
  Stats stats;
  stats.queued = static_cast<int64_t>(queue_.size());
  stats.running_rows = queue_.running_rows();
  stats.collectors = collectors_;
  return stats;
}

}  // namespace loopserve::server
