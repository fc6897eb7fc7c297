#include "server/scheduling/scheduler.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "server/observability/logging.h"
#include "server/repository/model_config.h"
#include "server/scheduling/batching.h"
#include "server/scheduling/direct_scheduler.h"
#include "server/scheduling/dynamic_batcher.h"
#include "server/scheduling/iteration_batcher.h"
#include "server/scheduling/sequence_batcher.h"
#include "server/scheduling/sequence_scheduler.h"

namespace loopserve::server {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// Requests one iteration-batching version may hold waiting to join its running batches.
constexpr int kIterationQueue = 4096;

// The version's IterationBatcher (parameters 'iteration_batching' "true"): checks that its Loop
// can be stepped row by row (a load error with the reason when not) and logs that the mode is on.
absl::StatusOr<std::shared_ptr<Scheduler>> MakeIterationBatcher(
    const inference::ModelConfig& config, const SchedulerContext& context) {
  LS_ASSIGN_OR_RETURN(BatchLayout layout, ReadBatchLayout(config));
  IterationBatcher::Options options;
  options.max_rows = static_cast<int>(config.max_batch_size());
  options.instances = InstanceCount(config);
  options.max_queue = kIterationQueue;
  options.unbatched_inputs = layout.unbatched_inputs;
  options.label = context.label;
  absl::StatusOr<std::shared_ptr<IterationBatcher>> batcher =
      IterationBatcher::Create(context.model, options);
  if (!batcher.ok()) {
    return Annotate(batcher.status(),
                    absl::StrCat("config.pbtxt: parameters '", kIterationBatchingParameter, "': "));
  }
  LogInfo(absl::StrCat(context.label, "iteration batching on: up to ", options.max_rows,
                       " rows per running batch, ", options.instances,
                       " running batch(es); requests join and leave between Loop iterations"));
  return std::shared_ptr<Scheduler>(*std::move(batcher));
}

}  // namespace

const std::vector<int>& Scheduler::server_inputs() const {
  static const std::vector<int>* const none = new std::vector<int>();
  return *none;
}

const Clock& Clock::Real() {
  static const RealClock* const clock = new RealClock();
  return *clock;
}

absl::StatusOr<std::shared_ptr<Scheduler>> MakeScheduler(const inference::ModelConfig& config,
                                                         SchedulerContext context) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<SequencePolicy> sequence,
                      SequencePolicy::FromConfig(config, *context.model, context.model_dir));
  if (sequence != nullptr) {
    return std::make_shared<SequenceScheduler>(
        std::make_shared<SequenceBatcher>(std::move(sequence), std::move(context.sequence_metrics)),
        std::move(context.label));
  }
  if (std::optional<BatchingPolicy> policy = BatchingPolicy::FromConfig(config)) {
    if (IterationBatchingOn(config)) return MakeIterationBatcher(config, context);
    return std::make_shared<DynamicBatcher>(*std::move(policy), InstanceCount(config),
                                            std::move(context.instances), std::move(context.label));
  }
  return std::make_shared<DirectScheduler>(std::move(context.instances));
}

}  // namespace loopserve::server
