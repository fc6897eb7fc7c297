#include "server/scheduling/sequence_scheduler.h"

#include <utility>

#include "engine/base/status_macros.h"

namespace loopserve::server {

SequenceScheduler::SequenceScheduler(std::shared_ptr<SequenceBatcher> batcher, std::string label)
    : batcher_(std::move(batcher)), label_(std::move(label)) {}

absl::Status SequenceScheduler::Enqueue(ScheduledCall& call, Executor& executor) {
  LS_ASSIGN_OR_RETURN(SequenceStep step, executor.TakeStep(call, batcher_->policy()));
  return Annotate(batcher_->Enqueue(std::move(step), executor.sequence_host()), label_);
}

void SequenceScheduler::Flush() {
  batcher_->Flush(absl::UnavailableError("the server is shutting down"));
}

Scheduler::Stats SequenceScheduler::stats() const {
  const SequenceBatcher::Stats sequences = batcher_->stats();
  Stats stats;
  stats.queued = sequences.backlog;
  stats.running_rows = sequences.live;
  return stats;
}

const std::vector<int>& SequenceScheduler::server_inputs() const {
  return batcher_->policy().server_inputs;
}

}  // namespace loopserve::server
