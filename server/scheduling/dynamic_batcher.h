#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/scheduling/batching.h"
#include "server/scheduling/direct_scheduler.h"
#include "server/scheduling/scheduler.h"
#include "server/scheduling/worker_pool.h"

namespace loopserve::server {

// The dynamic batcher of a version with `dynamic_batching` (Triton's DynamicBatchScheduler): it
// merges the calls of concurrent clients into one execution. Its queue and the rules that form a
// batch are a BatchQueue (see there); this class adds the threads: who collects, on which thread,
// and the waits.
//
// An admitted call runs at once on the caller's thread when its version is quiet
// (BatchQueue::Quiet: a lone client), nothing of it is queued or collecting and the direct
// scheduler's inline conditions hold (the version's collector slot is held meanwhile, so others
// queue); otherwise it goes into the queue (RESOURCE_EXHAUSTED when it holds the pool's
// max_queue_size calls). A streamed call bypasses the queue (it runs alone, as the
// DirectScheduler runs it). A call that finds a collector slot free sends a batch that is due now
// on its own thread under the same inline rule (no waiting), or else schedules a collector task
// on the pool (in the version's TaskGroup; at most BatchQueue::max_collectors at once), which
// waits for its batch. After each batch the collector continues with the queue, or hands over to
// a fresh task when other work waits in the pool. A batch of one runs as an unbatched request
// (Executor::RunMerged). The lock is taken per request and per batch, never inside a run.
//
// Thread-safe. Owned by its LoadedModel; the tasks it schedules hold it (shared_from_this), and
// the Executor handed to Enqueue must outlive them.
class DynamicBatcher : public Scheduler, public std::enable_shared_from_this<DynamicBatcher> {
 public:
  // `label`: "model 'rnn' v2: ", for messages. `instances` (may be null): the version's cap on
  // runs at once. `clock`: what the batch rules read (its waits are real waits).
  DynamicBatcher(BatchingPolicy policy, int max_collectors, std::shared_ptr<TaskGroup> instances,
                 std::string label, const Clock& clock = Clock::Real());

  absl::Status Enqueue(ScheduledCall& call, Executor& executor) override;
  void Flush() override;
  Stats stats() const override;

  const BatchingPolicy& policy() const { return queue_.policy(); }

 private:
  // What FormBatch did: moved a batch out of the queue, found the queue empty (or another
  // collector already waiting on it: this one then gives its slot back), or (may_wait false)
  // found no batch due yet.
  enum class Formed { kBatch, kIdle, kWait };

  // A lone client's call run on this thread, in the collector slot it took; false when the pool
  // was busy (the call then queues in that slot).
  bool RunAlone(ScheduledCall& call, Executor& executor);
  // Queues `call`; OK or RESOURCE_EXHAUSTED (a full queue). `holds_slot`: the call took a
  // collector slot (RunAlone found the pool busy), which goes to a worker collector.
  absl::Status Queue(ScheduledCall& call, Executor& executor, bool holds_slot, bool short_runs);
  // Schedules a collector for the slot the caller took; when the pool refuses and no collector
  // is left, answers every queued call with the pool's error.
  void StartCollector(Executor& executor);
  // One batch collected and run on the caller's thread in the collector slot the caller took;
  // the slot then goes to a worker collector if calls are left.
  void CollectOnce(Executor& executor);
  // A collector task: forms and runs batches until the queue is empty.
  void CollectBatches(Executor& executor);
  // Under the mutex: waits for a batch to be due and moves it out of the queue into `batch`;
  // calls that expired or were cancelled go to `expired`. `may_wait` false: never waits (a
  // collector on a protocol thread, which hands a batch still to be gathered to a worker).
  Formed FormBatch(std::vector<ScheduledCall*>& batch, std::vector<ScheduledCall*>& expired,
                   const MergeRule& rule, bool may_wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // After a batch was formed: takes a free collector slot for the calls left in the queue (none
  // waits for them); the caller then calls StartCollector.
  bool TakeSpareCollector() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // After a batch of `rows` inferences ran: no longer running; a collector gathering meanwhile
  // looks again (its share and how long it gathers changed).
  void BatchDone(int64_t rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A collector slot is given back. A collector waiting out the queue delay is woken: it may now
  // be the only one, and then it sends what it holds at once.
  void ReleaseCollector() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The inferences of a batch (its calls' batch sizes summed).
  static int64_t BatchRows(const std::vector<ScheduledCall*>& batch);

  const std::shared_ptr<TaskGroup> instances_;
  const std::string label_;
  const Clock& clock_;
  DirectScheduler direct_;  // streamed calls
  mutable absl::Mutex mutex_;
  absl::CondVar more_;  // signalled when a call arrives or a slot frees while a collector waits
  BatchQueue queue_ ABSL_GUARDED_BY(mutex_);
  int collectors_ ABSL_GUARDED_BY(mutex_) = 0;    // scheduled or running, <= max_collectors
  bool waiting_ ABSL_GUARDED_BY(mutex_) = false;  // a collector waits out the queue delay
};

}  // namespace loopserve::server
