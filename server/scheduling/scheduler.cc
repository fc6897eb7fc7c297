#include "server/scheduling/scheduler.h"

#include <optional>
#include <utility>

#include "server/scheduling/batching.h"
#include "server/scheduling/direct_scheduler.h"
#include "server/scheduling/dynamic_batcher.h"

namespace loopserve::server {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

const Clock& Clock::Real() {
  static const RealClock* const clock = new RealClock();
  return *clock;
}

std::shared_ptr<Scheduler> MakeScheduler(const inference::ModelConfig& config, int instance_count,
                                         std::shared_ptr<TaskGroup> instances, std::string label) {
  if (std::optional<BatchingPolicy> policy = BatchingPolicy::FromConfig(config)) {
    return std::make_shared<DynamicBatcher>(*std::move(policy), instance_count,
                                            std::move(instances), std::move(label));
  }
  return std::make_shared<DirectScheduler>(std::move(instances));
}

}  // namespace loopserve::server
