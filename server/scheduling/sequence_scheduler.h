#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/scheduling/scheduler.h"
#include "server/scheduling/sequence_batcher.h"

namespace loopserve::server {

// The Scheduler of a version with `sequence_batching`: each call is a step of the sequence it
// names (Executor::TakeStep), handed to the version's SequenceBatcher, which runs and answers it
// through the Executor's SequenceHost. Owns the batcher; thread-safe.
class SequenceScheduler : public Scheduler {
 public:
  // `label`: "model 'rnn' v2: ", for messages.
  SequenceScheduler(std::shared_ptr<SequenceBatcher> batcher, std::string label);

  absl::Status Enqueue(ScheduledCall& call, Executor& executor) override;
  // Ends every live sequence (UNAVAILABLE: the server is shutting down).
  void Flush() override;
  // queued: starts waiting for a slot; running_rows: sequences holding a slot.
  Stats stats() const override;
  // The sequence's control and state inputs.
  const std::vector<int>& server_inputs() const override;

  // The batcher itself (its sequence statistics: ServerApi finds a version's SequenceScheduler
  // behind its Scheduler and reads them here).
  const SequenceBatcher& batcher() const { return *batcher_; }

 private:
  const std::shared_ptr<SequenceBatcher> batcher_;
  const std::string label_;
};

}  // namespace loopserve::server
