#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/tensor/value.h"
#include "proto/model_config.pb.h"
#include "server/repository/model_config.h"
#include "server/scheduling/scheduler.h"

namespace loopserve::server {

// A version's `dynamic_batching` settings (config.pbtxt), as the batcher applies them.
struct BatchingPolicy {
  int64_t max_batch_size = 1;      // inferences per execution (the config's max_batch_size)
  std::vector<int64_t> preferred;  // preferred_batch_size, ascending
  absl::Duration max_queue_delay;  // max_queue_delay_microseconds
  bool preserve_ordering = false;  // one batch at a time, taken in arrival order

  // The policy of a complete config; std::nullopt without dynamic_batching.
  static std::optional<BatchingPolicy> FromConfig(const inference::ModelConfig& config);
};

// The requests of one model version waiting to be merged (the dynamic batcher's queue), and the
// rules that form a batch out of them. The DynamicBatcher owns one per version and guards it with
// its mutex: BatchQueue itself is not thread-safe and never waits or reads a clock; every
// decision takes `now`, so a test drives it on a FakeClock without threads. The queue borrows its
// calls, each until Take or Sweep hands it out to be answered.
//
// Formation: a collector takes the oldest call and every later one that CanMerge with it while
// the batch sizes sum to at most max_batch_size (with preserve_ordering, no call is skipped: the
// first that does not merge ends the batch). The batch goes (Look answers kSend) when it is
// full, reaches a preferred size, the version is quiet (Quiet: a lone client never waits), it
// holds its share of the version's inferences (Share: it takes no more, and the calls left start
// another collector), or when the oldest call has waited max_queue_delay (while another batch of
// the version runs: as long as a recent run took, up to kMaxGather, if longer) or the earliest
// deadline comes, or once Flush was called; otherwise it waits for more (kWait, until `due`).
// Calls that expired or were cancelled leave in a Sweep, or as the batch is taken, to be
// answered alone.
class BatchQueue {
 public:
  // `max_collectors`: batches of this version that may be collected or run at once (the
  // instance count; 1 with preserve_ordering).
  BatchQueue(BatchingPolicy policy, int max_collectors);

  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;

  // How long after a request last found its version busy (calls queued or a collector at
  // work) the version counts as having a lone client again: its requests then run at once.
  static constexpr absl::Duration kQuietAfter = absl::Milliseconds(20);
  // The longest a batch gathers while another batch of its version runs.
  static constexpr absl::Duration kMaxGather = absl::Milliseconds(100);

  const BatchingPolicy& policy() const { return policy_; }
  int max_collectors() const { return max_collectors_; }

  bool empty() const { return pending_.empty(); }
  size_t size() const { return pending_.size(); }
  int64_t running_rows() const { return running_rows_; }

  // A request arrives at `now` and finds the version busy (`busy`: calls queued or a collector
  // at work): the version is not quiet for kQuietAfter.
  void NoteBusy(absl::Time now) { last_busy_ = now; }
  // No request found the version busy for kQuietAfter: a lone client (its requests never
  // overlap), so nothing is gained by waiting for others.
  bool Quiet(absl::Time now) const { return now - last_busy_ >= kQuietAfter; }
  // A batch's fair share of the version's inferences (queued and running) over its collectors:
  // a batch goes once it holds that many and takes no more, so two instances run two halves
  // rather than one instance everything and the other single requests one at a time.
  int64_t Share() const;

  // `call` joins the queue at `now` (its enqueued time).
  void Push(ScheduledCall* call, absl::Time now);
  // Inferences of a batch start (a lone request run at once counts too) or end running.
  void StartRunning(int64_t rows) { running_rows_ += rows; }
  void StopRunning(int64_t rows) { running_rows_ -= rows; }
  // Every call queued, taken out (nobody will collect them).
  std::deque<ScheduledCall*> TakeAll();
  // Every batch is due at once from now on (shutdown).
  void Flush() { flush_ = true; }

  // The batch one collector gathers: the head and the later calls that merge with it, found by
  // a scan that goes on where it stopped when more arrive (a look after an arrival scans the new
  // calls only), and starts again from the head once a call left the queue.
  class Gathering {
   public:
    explicit Gathering(const BatchQueue& queue) : scanned_at_(queue.taken_) {}

   private:
    friend class BatchQueue;
    std::vector<ScheduledCall*> members_;
    int64_t size_ = 0;
    size_t scanned_ = 0;  // queue positions looked at; 0: start again from the head
    uint64_t scanned_at_;
    bool full_ = false;
    bool preferred_ = false;
    int64_t share_ = 1;
    absl::Time earliest_deadline_ = absl::InfiniteFuture();
  };
  enum class Step { kIdle, kSend, kWait };
  struct Verdict {
    Step step;
    absl::Time due = absl::InfiniteFuture();  // kWait: when the batch is due at the latest
  };
  // Calls that expired (deadline <= now) or were cancelled leave the queue into `expired`.
  void Sweep(absl::Time now, std::vector<ScheduledCall*>& expired);
  // Scans what arrived since the last look and decides: kIdle (queue empty), kSend, or kWait
  // until `due`. `recent_run`: the version's recent run time (InfiniteDuration: none yet).
  Verdict Look(Gathering& gathering, absl::Time now, absl::Duration recent_run,
               const MergeRule& rule);
  // After kSend: moves the batch out of the queue into `batch` (at most its share; a preferred
  // size first, the largest the calls make, in arrival order); members found expired or
  // cancelled by `now` go to `expired` instead. False when every member left (Look again).
  bool Take(Gathering& gathering, absl::Time now, std::vector<ScheduledCall*>& batch,
            std::vector<ScheduledCall*>& expired);

 private:
  const BatchingPolicy policy_;
  const int max_collectors_;
  std::deque<ScheduledCall*> pending_;
  // When a request last found the version busy (Quiet).
  absl::Time last_busy_ = absl::InfinitePast();
  // Inferences (batch sizes summed) in `pending_`, and in the version's batches running (Share).
  int64_t pending_rows_ = 0;
  int64_t running_rows_ = 0;
  // Counts the times calls were taken out of `pending_` (arrivals only append): a gathering
  // scans the queue again from its head when it changed since it last looked.
  uint64_t taken_ = 0;
  bool flush_ = false;  // Flush: every batch goes at once
};

// ---- Merging and splitting (stateless; thread-safe) ----
// `inputs` are a request's decoded, config-checked inputs in Model::inputs() order (AdaptInputs
// has run: batched inputs agree on their first dim).

// The request's batch size: the first dim of its batched inputs (1 when it has none).
int64_t BatchSize(const ModelIo& io, const std::vector<engine::Value>& inputs);

// Whether the request may share an execution at all: every input present is a tensor of a
// fixed-size element type (strings and sequences run alone).
bool Mergeable(const ModelIo& io, const std::vector<engine::Value>& inputs);

// Whether `other` may join a batch that `first` leads (both Mergeable): the same inputs present
// with the same element types, batched inputs with the same dims after the first, unbatched
// inputs (parameters 'unbatched_inputs') byte-equal with the same shape.
bool CanMerge(const ModelIo& io, const std::vector<engine::Value>& first,
              const std::vector<engine::Value>& other);

// The inputs of one execution over `requests` (mutually CanMerge, in batch order): batched
// inputs concatenated along axis 0, unbatched ones the first request's (moved out of it).
std::vector<engine::Value> MergeInputs(const ModelIo& io,
                                       absl::Span<std::vector<engine::Value>* const> requests);

// Splits an execution's outputs (Model::outputs() order) back into per-request outputs, each
// along its batch axis (ModelIo::OutputBatchAxis), `batch_sizes[k]` rows for request k in
// order. A request's part of an output whose rows are contiguous (batch axis 0, or only dims of 1
// before it) views `outputs`, which must outlive the split; other parts are copies. Internal
// naming the output when an output is no tensor, has no batch axis, or its batch dim is not the
// sum of `batch_sizes` (the model mixes its batch, or output_batch_axes is wrong).
absl::StatusOr<std::vector<std::vector<engine::Value>>> SplitOutputs(
    const ModelIo& io, const std::vector<engine::Value>& outputs,
    absl::Span<const int64_t> batch_sizes);

}  // namespace loopserve::server
