#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "server/observability/metrics.h"
#include "server/scheduling/scheduler.h"

namespace loopserve::server {

// One request as the batcher takes it (Executor::TakeRow): the call (borrowed until
// Executor::FinishRow), its inputs (Model::inputs() order, batched ones with one row) and its
// per-row settings.
struct RowRequest {
  ScheduledCall* call = nullptr;
  std::vector<engine::Value> inputs;
  engine::RowOptions options;
};

// What a version's iteration batching did so far (loopserve_iteration_* metrics, tests).
struct IterationBatchingStats {
  int64_t rows_admitted = 0;   // rows that joined a running batch
  int64_t rows_retired = 0;    // rows that left it (answered, failed, cancelled, expired)
  int64_t steps = 0;           // iterations the running batches ran
  int64_t row_iterations = 0;  // rows summed over those iterations (occupancy = this / steps)
  int64_t peak_rows = 0;       // the most rows one running batch held
};

// Iteration-level batching of one model version (config parameter `iteration_batching`), the
// version's Scheduler: each model instance keeps one running batch of the version's top-level
// Loop (engine::LoopStepper); between two iterations the driver answers the rows that ended and
// admits queued requests as new rows, so short requests never wait for long ones and finished
// rows stop costing compute.
//
// Drivers: at most `instances` at once, each a task on the Executor's pool owning one
// LoopStepper; started by Enqueue when requests wait and fewer drivers run, and gone when their
// batch and the queue are empty (their steppers are kept for the next). A request whose unbatched
// inputs differ from its driver's running batch waits for that batch to empty. A request waiting
// for room (in the queue, or for its batch) is answered at the next iteration boundary of a
// running batch once it is cancelled or its deadline passes by the batcher's clock (looked at
// once per kWaitCheckInterval of that clock), not only once it is admitted.
//
// Everything the batcher asks of the runner goes through the Executor handed to Enqueue
// (TakeRow, RowStarted, FinishRow, pool, Unqueued), which must outlive the batcher's drivers.
//
// Thread-safe. Created at load (Create checks the model and says why it cannot be stepped);
// owned by the LoadedModel (shared_ptr); each driver holds it too, so it outlives its rows.
class IterationBatcher : public Scheduler, public std::enable_shared_from_this<IterationBatcher> {
 public:
  struct Options {
    int max_rows = 1;   // rows per running batch: the config's max_batch_size
    int instances = 1;  // running batches at once: the instance count
    int max_queue = 1;  // requests waiting to join
    std::vector<std::string> unbatched_inputs;  // parameters 'unbatched_inputs'
    std::string label;                          // "model 'rnn' v2: ", for messages
    const Clock* clock = &Clock::Real();        // a waiting request's deadline is read on it
  };

  // How often (by the batcher's clock) a running batch looks for waiting requests that left.
  static constexpr absl::Duration kWaitCheckInterval = absl::Milliseconds(1);

  // FailedPrecondition with the engine's reason when the model's Loop cannot be stepped row by row.
  static absl::StatusOr<std::shared_ptr<IterationBatcher>> Create(
      std::shared_ptr<const engine::Model> model, const Options& options);

  // Queues `call` (Executor::TakeRow) to join a running batch, starting a driver when one may
  // start. ResourceExhausted when max_queue requests wait (the call is then the caller's again).
  // When no driver could start and none runs, the queued requests are answered with the pool's
  // error.
  absl::Status Enqueue(ScheduledCall& call, Executor& executor) override;

  // Answers every queued request (not yet in a running batch) CANCELLED (shutdown).
  void Flush() override;

  // queued: requests waiting to join; running_rows: rows of the running batches; collectors:
  // drivers scheduled or running.
  Stats stats() const override;
  IterationBatchingStats iteration_stats() const;
  // Where the loopserve_iteration_* metrics go.
  void SetMetrics(std::shared_ptr<ModelVersionMetrics> metrics) override;
  const Options& options() const { return options_; }

 private:
  class Driver;

  IterationBatcher(std::shared_ptr<const engine::Model> model, Options options,
                   std::unique_ptr<engine::LoopStepper> first);

  // A driver's task: admits, steps and retires until its batch and the queue are empty.
  void Drive(std::unique_ptr<engine::LoopStepper> stepper, Executor* executor);
  // Starts a driver with `stepper` (a new one when null); the error when none could start.
  absl::Status StartDriver(std::unique_ptr<engine::LoopStepper> stepper, Executor& executor);
  // Moves the queued requests that were cancelled or whose deadline passed by `now` to `left`.
  void TakeLeftLocked(absl::Time now, std::vector<std::pair<RowRequest, absl::Status>>& left)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A driver is gone (it counted `counted` running rows): when it was the last, the queue is
  // answered `why`.
  void DriverGone(const absl::Status& why, Executor& executor, int64_t counted);

  const std::shared_ptr<const engine::Model> model_;
  const Options options_;
  bool has_unbatched_ = false;  // rows may have to wait for a batch with their unbatched inputs
  mutable absl::Mutex mutex_;
  std::deque<RowRequest> queue_ ABSL_GUARDED_BY(mutex_);
  int drivers_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t running_rows_ ABSL_GUARDED_BY(mutex_) = 0;  // the running batches' rows
  std::vector<std::unique_ptr<engine::LoopStepper>> idle_ ABSL_GUARDED_BY(mutex_);
  IterationBatchingStats stats_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<ModelVersionMetrics> metrics_ ABSL_GUARDED_BY(mutex_);
  Executor* executor_ ABSL_GUARDED_BY(mutex_) = nullptr;  // Flush's: the last Enqueue's
};

}  // namespace loopserve::server
