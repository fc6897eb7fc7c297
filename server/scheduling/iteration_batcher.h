#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "server/observability/metrics.h"

namespace loopserve::server {

class InferenceCall;

// What an IterationBatcher needs from the runner that feeds it, and nothing more: a worker to
// drive a running batch on, and a way to answer a request whose row ended. Implemented by the
// InferenceRunner; must outlive every batcher it feeds.
class RowHost {
 public:
  virtual ~RowHost() = default;
  // Runs `drive` on a worker of the version (its instance group). An error when the pool refuses
  // (full queue, shutting down): `drive` is then dropped without running.
  virtual absl::Status StartDriver(std::function<void()> drive) = 0;
  // `call` left the queue and joined a running batch (its queue time ends here).
  virtual void RowStarted(InferenceCall& call) = 0;
  // `call`'s row ended: its outputs in Model::outputs() order, or why it ended early. Answers and
  // finishes the call, on the driver's thread; the batcher never touches `call` afterwards.
  virtual void FinishRow(InferenceCall& call,
                         absl::StatusOr<std::vector<engine::Value>> outputs) = 0;
};

// One request as the batcher takes it: the call (borrowed until RowHost::FinishRow), its inputs
// (Model::inputs() order, batched ones with one row) and its per-row settings.
struct RowRequest {
  InferenceCall* call = nullptr;
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

// Iteration-level batching of one model version (config parameter `iteration_batching`): each
// model instance keeps one running batch of the version's top-level Loop (engine::LoopStepper);
// between two iterations the driver answers the rows that ended and admits queued requests as new
// rows, so short requests never wait for long ones and finished rows stop costing compute.
//
// Drivers: at most `instances` at once, each a task on the runner's pool (RowHost::StartDriver)
// owning one LoopStepper; started by Enqueue when requests wait and fewer drivers run, and gone
// when their batch and the queue are empty (their steppers are kept for the next). A request
// whose unbatched inputs differ from its driver's running batch waits for that batch to empty.
//
// Thread-safe. Created at load (Create checks the model and says why it cannot be stepped);
// owned by the LoadedModel (shared_ptr); each driver holds it too, so it outlives its rows.
class IterationBatcher : public std::enable_shared_from_this<IterationBatcher> {
 public:
  struct Options {
    int max_rows = 1;   // rows per running batch: the config's max_batch_size
    int instances = 1;  // running batches at once: the instance count
    int max_queue = 1;  // requests waiting to join (the pool's --max_queue_size)
    std::vector<std::string> unbatched_inputs;  // parameters 'unbatched_inputs'
  };

  // FailedPrecondition with the engine's reason when the model's Loop cannot be stepped row by row.
  static absl::StatusOr<std::shared_ptr<IterationBatcher>> Create(
      std::shared_ptr<const engine::Model> model, const Options& options);

  // Queues `row` to join a running batch, starting a driver when one may start. ResourceExhausted
  // when max_queue requests wait; the pool's error when no driver could start and none runs (the
  // request is then not queued). Either way `row.call` is the caller's again on error.
  absl::Status Enqueue(RowRequest row, RowHost& host);

  // Answers every queued request (not yet in a running batch) with `status` (shutdown).
  void Flush(RowHost& host, const absl::Status& status);

  IterationBatchingStats stats() const;
  // Where the loopserve_iteration_* metrics go (the version's; set once before the version
  // serves, since the batcher is made before its metrics are).
  void SetMetrics(std::shared_ptr<ModelVersionMetrics> metrics);
  const Options& options() const { return options_; }

 private:
  IterationBatcher(std::shared_ptr<const engine::Model> model, Options options,
                   std::unique_ptr<engine::LoopStepper> first);

  // A driver: admits, steps and retires until its batch and the queue are empty.
  void Drive(std::unique_ptr<engine::LoopStepper> stepper, RowHost* host);

  const std::shared_ptr<const engine::Model> model_;
  const Options options_;
  bool has_unbatched_ = false;  // rows may have to wait for a batch with their unbatched inputs
  mutable absl::Mutex mutex_;
  std::deque<RowRequest> queue_ ABSL_GUARDED_BY(mutex_);
  int drivers_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<std::unique_ptr<engine::LoopStepper>> idle_ ABSL_GUARDED_BY(mutex_);
  IterationBatchingStats stats_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<ModelVersionMetrics> metrics_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace loopserve::server
