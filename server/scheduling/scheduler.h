#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "proto/model_config.pb.h"
#include "server/observability/metrics.h"
#include "server/scheduling/worker_pool.h"

// The scheduling room: how an admitted request of a model version gets to run. Every version has
// one Scheduler, chosen when it loads from its config (MakeScheduler: the DirectScheduler, the
// DynamicBatcher for `dynamic_batching`, the IterationBatcher for parameter `iteration_batching`,
// the SequenceScheduler for `sequence_batching`) and held by its LoadedModel, so a request pinned
// to the version finds it there. The runner (server/runner/inference_runner.h) admits a request
// (binds and checks it alone, so a bad request fails alone), hands it to its version's scheduler
// (Enqueue), and implements the Executor through which a scheduler runs and answers what it
// scheduled. A scheduler decides when and with which others a call runs and on which thread; it
// never runs a model or answers a client itself.
//
// The shapes follow Triton's Scheduler (Enqueue of a request, Stop/flush) with its
// DynamicBatchScheduler, and TF Serving's BatchScheduler (Schedule, NumEnqueuedTasks). A further
// scheduler is another implementation of Scheduler, created by MakeScheduler from its config
// section; the Executor serves each kind what it needs of the runner (the pool and whole runs;
// rows of a running Loop; steps of a sequence).

namespace loopserve::server {

class BatchQueue;
struct RowRequest;      // server/scheduling/iteration_batcher.h
struct SequenceHost;    // server/scheduling/sequence_batcher.h
struct SequencePolicy;  // server/scheduling/sequence_batcher.h
struct SequenceStep;    // server/scheduling/sequence_batcher.h

// The time a scheduler decides by, injected (the DynamicBatcher's; its BatchQueue takes each
// `now` as an argument), so a test drives the batch rules on a FakeClock without threads.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // absl::Now(); a process-wide instance.
  static const Clock& Real();
};

// A clock that moves only when told (tests). Thread-safe: a test may advance it while a
// scheduler's task reads it.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mutex_);
    return now_;
  }
  void Advance(absl::Duration by) {
    absl::MutexLock lock(&mutex_);
    now_ += by;
  }

 private:
  mutable absl::Mutex mutex_;
  absl::Time now_ ABSL_GUARDED_BY(mutex_);
};

// A request as a scheduler sees it: admitted, validated against its version, not yet run. The
// runner's InferenceCall derives from it and fills it at admission. A scheduler borrows the call
// from Enqueue until it hands it to the Executor (RunAlone, RunMerged, Reject), which answers it;
// it must not touch the call after that.
class ScheduledCall {
 public:
  ScheduledCall(const ScheduledCall&) = delete;
  ScheduledCall& operator=(const ScheduledCall&) = delete;

  // Stops the request: queued, it is answered CANCELLED without running; running, the engine
  // stops at its next Loop iteration or kernel chunk. Any thread.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  // When the request stops counting (the protocol's, or its `timeout` parameter's).
  absl::Time deadline() const { return deadline_; }
  // Its inferences: the batch size with max_batch_size > 0, else 1.
  int64_t batch_size() const { return batch_size_; }
  // Whether it streams its Loop's iterations (`stream_iterations`): it then runs alone, on a
  // worker (its client's reads pace the run).
  bool streamed() const { return streamed_; }
  // When it entered its version's batch queue (BatchQueue::Push).
  absl::Time enqueued() const { return enqueued_; }

 protected:
  explicit ScheduledCall(absl::Time deadline) : deadline_(deadline) {}
  ~ScheduledCall() = default;

  absl::Time deadline_;
  std::atomic<bool> cancelled_{false};
  int64_t batch_size_ = 1;
  bool streamed_ = false;

 private:
  friend class BatchQueue;
  absl::Time enqueued_;
};

// Which calls may share an execution (scheduling/batching.h: Mergeable, CanMerge, over the
// calls' decoded inputs). Thread-safe.
class MergeRule {
 public:
  virtual ~MergeRule() = default;
  // Whether `call` may share an execution at all.
  virtual bool Mergeable(const ScheduledCall& call) const = 0;
  // Whether `other` may join a batch that `head` leads (both Mergeable).
  virtual bool CanMerge(const ScheduledCall& head, const ScheduledCall& other) const = 0;
};

// What a scheduler needs of the runner: the pool, running a call alone or calls merged, and
// answering a call that will not run. The runner implements it and outlives every call and every
// task a scheduler has scheduled. Thread-safe.
class Executor : public MergeRule {
 public:
  // The server's workers.
  virtual WorkerPool& pool() = 0;
  // Versions whose recent runs averaged less may run on the protocol's thread (zero: never).
  virtual absl::Duration inline_run_limit() const = 0;

  // Runs `call` alone on this thread and answers it (a call that expired or was cancelled while
  // queued is answered so without running). Nothing thrown leaves it.
  virtual void RunAlone(ScheduledCall& call) = 0;
  // As RunAlone for a call that was never queued and runs on the protocol's thread: counts it in
  // flight first.
  virtual void RunHere(ScheduledCall& call) = 0;
  // Runs `calls` (mutually CanMerge, batch order) as one execution and answers each; one call
  // runs as RunAlone. Nothing thrown leaves it.
  virtual void RunMerged(absl::Span<ScheduledCall* const> calls) = 0;
  // Answers `call` with `status` (a pool's refusal) without running it.
  virtual void Reject(ScheduledCall& call, const absl::Status& status) = 0;

  // The request's own client is watched while it runs on the protocol's thread (a protocol
  // that reports a cancel only after its handler returns).
  virtual void WatchWhileHere(ScheduledCall& call) = 0;
  // `call` waits for a worker (loopserve_queue_depth, in flight); Unqueued undoes the count of a
  // call that did not queue after all.
  virtual void Queued(ScheduledCall& call) = 0;
  virtual void Unqueued(ScheduledCall& call) = 0;

  // Iteration batching (IterationBatcher). `call` as a row of a running batch: its inputs (moved
  // out of the call), deadline, cancel flag, the version's caps per row and, when it streams, the
  // call as the row's observer; counted queued and in flight from here on (Unqueued undoes the
  // former for a row that does not queue after all).
  virtual RowRequest TakeRow(ScheduledCall& call) = 0;
  // `call` left the queue and joined a running batch (its queue time ends here).
  virtual void RowStarted(ScheduledCall& call) = 0;
  // `call`'s row ended: its outputs in Model::outputs() order, or why it ended early (a
  // CANCELLED or DEADLINE_EXCEEDED status is restated by where the call was). Answers the call on
  // this thread; the scheduler never touches it afterwards.
  virtual void FinishRow(ScheduledCall& call,
                         absl::StatusOr<std::vector<engine::Value>> outputs) = 0;

  // Sequence batching (SequenceBatcher). `call` as a step of the sequence it names: its inputs
  // (moved out of the call; the control and state inputs empty) and, unless the client named its
  // outputs, the state outputs left out of its answer; counted in flight from here on.
  // InvalidArgument for a batch size other than 1.
  virtual absl::StatusOr<SequenceStep> TakeStep(ScheduledCall& call,
                                                const SequencePolicy& policy) = 0;
  // How a sequence batcher runs and answers its steps; lives as long as the Executor.
  virtual const SequenceHost& sequence_host() const = 0;
};

// A moving average of a version's recent run times (each new run weighs 1/8), the scheduler's
// own estimate for its timing rules; InfiniteDuration before the first run. Concurrent runs may
// lose an update to each other: an estimate, not a statistic. Thread-safe.
class RecentRuns {
 public:
  void Record(absl::Duration took) {
    const int64_t ns = std::max<int64_t>(0, absl::ToInt64Nanoseconds(took));
    const int64_t recent = recent_ns_.load(std::memory_order_relaxed);
    recent_ns_.store(recent < 0 ? ns : recent + (ns - recent) / 8, std::memory_order_relaxed);
  }
  absl::Duration Get() const {
    const int64_t recent = recent_ns_.load(std::memory_order_relaxed);
    return recent < 0 ? absl::InfiniteDuration() : absl::Nanoseconds(recent);
  }

 private:
  std::atomic<int64_t> recent_ns_{-1};
};

// The scheduler of one model version. Created at load, owned by the version's LoadedModel
// (shared_ptr: it lives while any request pins the version, and while a task it scheduled runs).
// Thread-safe: Enqueue runs on every protocol thread at once.
class Scheduler {
 public:
  virtual ~Scheduler() = default;

  // Takes an admitted call. OK: the call was run and answered on this thread, or is now the
  // scheduler's (queued, or handed to a worker), to be handed to `executor` later. Otherwise the
  // error to answer it with (RESOURCE_EXHAUSTED: a full queue), and the call is the caller's
  // again. `executor` must outlive every task this schedules.
  virtual absl::Status Enqueue(ScheduledCall& call, Executor& executor) = 0;

  // Shutdown past its exit timeout: whatever waits for company goes now (the calls, cancelled
  // by then, are answered at once instead of when a long queue delay ends).
  virtual void Flush() = 0;

  // One Model::Run of this version took `took` (once per member of a merged run): the recent-run
  // estimate the timing rules use.
  void RecordRun(absl::Duration took) { recent_.Record(took); }
  absl::Duration recent_run() const { return recent_.Get(); }

  // What the scheduler holds now (diagnostics, tests).
  struct Stats {
    int64_t queued = 0;        // calls waiting in its queue
    int64_t running_rows = 0;  // inferences of its batches running
    int collectors = 0;        // batch collectors scheduled or running
  };
  virtual Stats stats() const = 0;

  // The model inputs (Model::inputs() indices) this scheduler feeds itself, which a request
  // need not and may not send (a sequence's control and state inputs); empty for most.
  virtual const std::vector<int>& server_inputs() const;

  // Where the scheduler's own series go (the version's metrics, made after the scheduler: set
  // once before the version serves). Most schedulers record nothing themselves.
  virtual void SetMetrics(std::shared_ptr<ModelVersionMetrics> metrics) {}

 private:
  RecentRuns recent_;
};

// What MakeScheduler needs of a version beside its complete config.
struct SchedulerContext {
  std::shared_ptr<const engine::Model> model;  // the iteration batcher's Loop; a sequence's states
  std::string model_dir;                       // holds a sequence's initial_state/ files
  std::shared_ptr<TaskGroup> instances;        // its cap on runs at once; may be null
  std::string label;                           // "model 'rnn' v2: ", for messages
  SequenceMetrics sequence_metrics;            // the version's sequence series (default: none)
};

// The scheduler a version's complete config asks for: the SequenceScheduler with
// `sequence_batching`; with `dynamic_batching`, the IterationBatcher when parameter
// `iteration_batching` is on, else the DynamicBatcher; otherwise the DirectScheduler. A load
// error (InvalidArgument, FailedPrecondition) when the config's scheduler cannot serve the model:
// a Loop that cannot be stepped row by row, a sequence state that cannot be made.
absl::StatusOr<std::shared_ptr<Scheduler>> MakeScheduler(const inference::ModelConfig& config,
                                                         SchedulerContext context);

}  // namespace loopserve::server
