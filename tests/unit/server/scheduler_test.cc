// The schedulers against the Executor contract (server/scheduling/scheduler.h), with a fake
// executor over a real WorkerPool: which thread a call runs on, when it is counted as queued,
// what a batch holds, and what a full queue answers. Expected values follow from the rules the
// headers state (DirectScheduler, DynamicBatcher), not from a run.

#include "server/scheduling/scheduler.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/scheduling/batching.h"
#include "server/scheduling/direct_scheduler.h"
#include "server/scheduling/dynamic_batcher.h"
#include "server/scheduling/iteration_batcher.h"
#include "server/scheduling/sequence_batcher.h"
#include "server/scheduling/worker_pool.h"

namespace loopserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Call : public ScheduledCall {
 public:
  explicit Call(int id, bool streamed = false) : ScheduledCall(absl::InfiniteFuture()), id_(id) {
    streamed_ = streamed;
  }
  int id() const { return id_; }

 private:
  const int id_;
};

int IdOf(const ScheduledCall& call) { return static_cast<const Call&>(call).id(); }

// Records what the scheduler asked for, and on which thread ("here" = the test's thread).
class FakeExecutor : public Executor {
 public:
  FakeExecutor(int max_queue_size, absl::Duration inline_run_limit)
      : pool_(1, max_queue_size), inline_run_limit_(inline_run_limit) {}

  WorkerPool& pool() override { return pool_; }
  absl::Duration inline_run_limit() const override { return inline_run_limit_; }
  void RunAlone(ScheduledCall& call) override { Record("alone", IdOf(call), /*ran=*/true); }
  void RunHere(ScheduledCall& call) override { Record("here", IdOf(call), /*ran=*/true); }
  void RunMerged(absl::Span<ScheduledCall* const> calls) override {
    std::vector<int> ids;
    for (const ScheduledCall* call : calls) ids.push_back(IdOf(*call));
    absl::MutexLock lock(&mutex_);
    events_.push_back(absl::StrCat("merged ", absl::StrJoin(ids, ",")));
  }
  void Reject(ScheduledCall& call, const absl::Status& status) override {
    Record("reject", IdOf(call));
  }
  void WatchWhileHere(ScheduledCall& call) override {}
  void Queued(ScheduledCall& call) override { Record("queued", IdOf(call)); }
  void Unqueued(ScheduledCall& call) override { Record("unqueued", IdOf(call)); }
  bool Mergeable(const ScheduledCall& call) const override { return true; }
  bool CanMerge(const ScheduledCall& head, const ScheduledCall& other) const override {
    return true;
  }
  // Rows and steps are the iteration and sequence batchers' (iteration_batcher_test,
  // sequence_batcher_test); these schedulers never ask for them.
  RowRequest TakeRow(ScheduledCall& call) override {
    ADD_FAILURE() << "TakeRow";
    return RowRequest();
  }
  void RowStarted(ScheduledCall& call) override { ADD_FAILURE() << "RowStarted"; }
  void FinishRow(ScheduledCall& call, absl::StatusOr<std::vector<engine::Value>>) override {
    ADD_FAILURE() << "FinishRow";
  }
  absl::StatusOr<SequenceStep> TakeStep(ScheduledCall& call, const SequencePolicy&) override {
    ADD_FAILURE() << "TakeStep";
    return absl::InternalError("TakeStep");
  }
  const SequenceHost& sequence_host() const override {
    ADD_FAILURE() << "sequence_host";
    return sequence_host_;
  }

  // Waits for every task scheduled so far, then returns what happened.
  std::vector<std::string> Drain() {
    pool_.Shutdown();
    absl::MutexLock lock(&mutex_);
    return events_;
  }
  // Whether `id` ran (RunAlone, RunHere) on a thread other than the test's.
  bool RanOnWorker(int id) {
    absl::MutexLock lock(&mutex_);
    for (const auto& [event_id, thread] : threads_) {
      if (event_id == id) return thread != test_thread_;
    }
    return false;
  }

 private:
  void Record(const std::string& what, int id, bool ran = false) {
    absl::MutexLock lock(&mutex_);
    events_.push_back(absl::StrCat(what, " ", id));
    if (ran) threads_.emplace_back(id, std::this_thread::get_id());
  }

  WorkerPool pool_;
  const SequenceHost sequence_host_;
  const absl::Duration inline_run_limit_;
  const std::thread::id test_thread_ = std::this_thread::get_id();
  absl::Mutex mutex_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::pair<int, std::thread::id>> threads_ ABSL_GUARDED_BY(mutex_);
};

TEST(DirectSchedulerTest, AShortRunGoesOnTheCallersThread) {
  FakeExecutor executor(4, absl::Seconds(1));
  DirectScheduler scheduler(nullptr);
  scheduler.RecordRun(absl::Milliseconds(1));  // recent runs under the 1 s limit
  Call call(1);
  ASSERT_TRUE(scheduler.Enqueue(call, executor).ok());
  EXPECT_THAT(executor.Drain(), ElementsAre("here 1"));
  EXPECT_FALSE(executor.RanOnWorker(1));
}

TEST(DirectSchedulerTest, UnknownOrLongRunsAndStreamsGoToAWorker) {
  FakeExecutor executor(4, absl::Seconds(1));
  DirectScheduler scheduler(nullptr);
  Call first(1);  // no run yet: its time is unknown
  ASSERT_TRUE(scheduler.Enqueue(first, executor).ok());
  scheduler.RecordRun(absl::Milliseconds(1));
  Call streamed(2, /*streamed=*/true);  // short runs, but a stream never runs inline
  ASSERT_TRUE(scheduler.Enqueue(streamed, executor).ok());
  const std::vector<std::string> events = executor.Drain();
  EXPECT_THAT(events,
              ::testing::UnorderedElementsAre("queued 1", "alone 1", "queued 2", "alone 2"));
  EXPECT_TRUE(executor.RanOnWorker(1));
  EXPECT_TRUE(executor.RanOnWorker(2));
}

TEST(DirectSchedulerTest, AFullPoolRefusesAtOnceAndUncounts) {
  FakeExecutor executor(1, absl::ZeroDuration());
  absl::Notification release;
  ASSERT_TRUE(executor.pool().TrySchedule([&] { release.WaitForNotification(); }).ok());
  DirectScheduler scheduler(nullptr);
  Call queued(1), refused(2);
  // The worker may not have taken the blocker yet: then the pool's one queue slot is full now.
  absl::Status first = scheduler.Enqueue(queued, executor);
  absl::Status second = scheduler.Enqueue(refused, executor);
  EXPECT_TRUE(absl::IsResourceExhausted(second)) << second;
  release.Notify();
  const std::vector<std::string> events = executor.Drain();
  EXPECT_THAT(events, ::testing::Contains("unqueued 2"));
  EXPECT_THAT(events, ::testing::Not(::testing::Contains("alone 2")));
  if (first.ok()) {
    EXPECT_THAT(events, ::testing::Contains("alone 1"));
  }
}

BatchingPolicy Policy(int64_t max_batch_size) {
  BatchingPolicy policy;
  policy.max_batch_size = max_batch_size;
  policy.max_queue_delay = absl::Seconds(30);  // no batch waits it out here
  return policy;
}

TEST(DynamicBatcherTest, CallsQueuedBehindABusyWorkerRunAsOneBatch) {
  // One collector (one instance): its share is every queued inference, so once the worker is
  // free the three calls go as one batch, in arrival order.
  FakeExecutor executor(8, absl::ZeroDuration());
  absl::Notification release;
  ASSERT_TRUE(executor.pool().TrySchedule([&] { release.WaitForNotification(); }).ok());
  auto batcher = std::make_shared<DynamicBatcher>(Policy(8), 1, nullptr, "model 'm' v1: ");
  Call a(1), b(2), c(3);
  ASSERT_TRUE(batcher->Enqueue(a, executor).ok());
  ASSERT_TRUE(batcher->Enqueue(b, executor).ok());
  ASSERT_TRUE(batcher->Enqueue(c, executor).ok());
  EXPECT_EQ(batcher->stats().queued, 3);
  EXPECT_EQ(batcher->stats().collectors, 1);
  release.Notify();
  EXPECT_THAT(executor.Drain(), ElementsAre("queued 1", "queued 2", "queued 3", "merged 1,2,3"));
  EXPECT_EQ(batcher->stats().queued, 0);
  EXPECT_EQ(batcher->stats().collectors, 0);
}

TEST(DynamicBatcherTest, AFullBatchQueueIsResourceExhaustedNamingTheModel) {
  // The batch queue holds at most the pool's max_queue_size calls.
  FakeExecutor executor(2, absl::ZeroDuration());
  absl::Notification release;
  ASSERT_TRUE(executor.pool().TrySchedule([&] { release.WaitForNotification(); }).ok());
  auto batcher = std::make_shared<DynamicBatcher>(Policy(8), 1, nullptr, "model 'm' v1: ");
  Call a(1), b(2), c(3);
  ASSERT_TRUE(batcher->Enqueue(a, executor).ok());
  ASSERT_TRUE(batcher->Enqueue(b, executor).ok());
  const absl::Status full = batcher->Enqueue(c, executor);
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(std::string(full.message()),
              HasSubstr("model 'm' v1: the batch queue holds 2 requests already"));
  release.Notify();
  EXPECT_THAT(executor.Drain(),
              ElementsAre("queued 1", "queued 2", "queued 3", "unqueued 3", "merged 1,2"));
}

TEST(DynamicBatcherTest, AStreamedCallBypassesTheQueue) {
  FakeExecutor executor(8, absl::ZeroDuration());
  auto batcher = std::make_shared<DynamicBatcher>(Policy(8), 1, nullptr, "model 'm' v1: ");
  Call streamed(1, /*streamed=*/true);
  ASSERT_TRUE(batcher->Enqueue(streamed, executor).ok());
  EXPECT_THAT(executor.Drain(), ElementsAre("queued 1", "alone 1"));
  EXPECT_EQ(batcher->stats().collectors, 0);
}

}  // namespace
}  // namespace loopserve::server
