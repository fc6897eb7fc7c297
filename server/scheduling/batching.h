#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/tensor/value.h"
#include "proto/model_config.pb.h"
#include "server/repository/model_config.h"

namespace loopserve::server {

class InferenceCall;

// A version's `dynamic_batching` settings (config.pbtxt), as the batcher applies them.
struct BatchingPolicy {
  int64_t max_batch_size = 1;      // inferences per execution (the config's max_batch_size)
  std::vector<int64_t> preferred;  // preferred_batch_size, ascending
  absl::Duration max_queue_delay;  // max_queue_delay_microseconds
  bool preserve_ordering = false;  // one batch at a time, taken in arrival order

  // The policy of a complete config; std::nullopt without dynamic_batching.
  static std::optional<BatchingPolicy> FromConfig(const inference::ModelConfig& config);
};

// The requests of one model version waiting to be merged (the dynamic batcher's queue), and how
// many batch collectors run for it. Created at load for a version with `dynamic_batching`;
// LoadedModel owns it (shared_ptr), so it lives as long as any request pins the version. The
// InferenceRunner drives it: it queues admitted calls and runs collectors on its worker pool
// (see InferenceRunner). Its fields are the runner's, guarded by `mutex_`; the queue holds
// borrowed calls, each until the runner takes it out to answer it.
class BatchQueue {
 public:
  // `max_collectors`: batches of this version that may be collected or run at once (the
  // instance count; 1 with preserve_ordering).
  BatchQueue(BatchingPolicy policy, int max_collectors);

  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;

  const BatchingPolicy& policy() const { return policy_; }
  int max_collectors() const { return max_collectors_; }

 private:
  friend class InferenceRunner;

  // How long after a request last found its version busy (calls queued or a collector at
  // work) the version counts as having a lone client again: its requests then run at once.
  static constexpr absl::Duration kQuietAfter = absl::Milliseconds(20);

  // A collector slot is given back. A collector waiting out the queue delay is woken: it may now
  // be the only one, and then it sends what it holds at once.
  void ReleaseCollector() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    --collectors_;
    if (waiting_) more_.Signal();
  }

  // No request found the version busy for kQuietAfter: a lone client (its requests never
  // overlap), so nothing is gained by waiting for others.
  bool Quiet(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return now - last_busy_ >= kQuietAfter;
  }

  // A batch's fair share of the version's inferences (queued and running) over its collectors:
  // a batch goes once it holds that many and takes no more, so two instances run two halves
  // rather than one instance everything and the other single requests one at a time.
  int64_t Share() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    const int64_t rows = pending_rows_ + running_rows_;
    return std::clamp<int64_t>((rows + max_collectors_ - 1) / max_collectors_, 1,
                               policy_.max_batch_size);
  }

  const BatchingPolicy policy_;
  const int max_collectors_;
  absl::Mutex mutex_;
  absl::CondVar more_;  // signalled when a call arrives or a slot frees while a collector waits
  std::deque<InferenceCall*> pending_ ABSL_GUARDED_BY(mutex_);
  int collectors_ ABSL_GUARDED_BY(mutex_) = 0;    // scheduled or running, <= max_collectors_
  bool waiting_ ABSL_GUARDED_BY(mutex_) = false;  // a collector waits out the queue delay
  // When a request last found the version busy (Quiet).
  absl::Time last_busy_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  // Inferences (batch sizes summed) in `pending_`, and in the version's batches running (Share).
  int64_t pending_rows_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t running_rows_ ABSL_GUARDED_BY(mutex_) = 0;
  // Counts the times calls were taken out of `pending_` (arrivals only append): a collector that
  // waited scans the queue again from its head when it changed meanwhile.
  uint64_t taken_ ABSL_GUARDED_BY(mutex_) = 0;
  // Set by InferenceRunner::CancelAll (shutdown past its exit timeout): every batch goes at once.
  bool flush_ ABSL_GUARDED_BY(mutex_) = false;
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
