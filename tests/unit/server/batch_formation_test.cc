// The dynamic batcher's batch-formation rules (server/scheduling/batching.h, BatchQueue), on a
// FakeClock and without threads. Each case sets up one rule and expects what the rule itself says
// (the comment above BatchQueue): a batch goes when full, at a preferred size (the largest the
// calls make), for a quiet version, at its share of the version's inferences ((queued + running)
// over the collectors, rounded up, at most max_batch_size), when its oldest call has waited
// max_queue_delay (while another batch runs: the recent run time, up to 100 ms, if longer) or
// the earliest deadline comes, or after Flush; expired and cancelled calls leave to be answered
// alone; preserve_ordering skips no call.

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/scheduling/batching.h"
#include "server/scheduling/scheduler.h"

namespace loopserve::server {
namespace {

using ::testing::ElementsAre;
using Step = BatchQueue::Step;

constexpr absl::Duration kDelay = absl::Milliseconds(10);

// A queued request: `rows` inferences, inputs of kind `shape` (calls merge when their shapes
// agree; shape < 0: may not share an execution at all).
class FakeCall : public ScheduledCall {
 public:
  FakeCall(int64_t rows, int shape = 0, absl::Time deadline = absl::InfiniteFuture())
      : ScheduledCall(deadline), shape_(shape) {
    batch_size_ = rows;
  }
  int shape() const { return shape_; }

 private:
  const int shape_;
};

class ShapeRule : public MergeRule {
 public:
  bool Mergeable(const ScheduledCall& call) const override {
    return static_cast<const FakeCall&>(call).shape() >= 0;
  }
  bool CanMerge(const ScheduledCall& head, const ScheduledCall& other) const override {
    return static_cast<const FakeCall&>(head).shape() ==
           static_cast<const FakeCall&>(other).shape();
  }
};

class BatchFormationTest : public ::testing::Test {
 protected:
  // A queue of max_batch_size 8 and kDelay with `collectors` collectors; the version is busy
  // (not quiet) from the start unless `quiet`.
  void Make(int collectors, std::vector<int64_t> preferred = {}, bool preserve_ordering = false,
            bool quiet = false) {
    BatchingPolicy policy;
    policy.max_batch_size = 8;
    policy.preferred = std::move(preferred);
    policy.max_queue_delay = kDelay;
    policy.preserve_ordering = preserve_ordering;
    queue_ = std::make_unique<BatchQueue>(policy, collectors);
    if (!quiet) queue_->NoteBusy(clock_.Now());
  }

  FakeCall* Push(int64_t rows, int shape = 0, absl::Time deadline = absl::InfiniteFuture()) {
    calls_.push_back(std::make_unique<FakeCall>(rows, shape, deadline));
    queue_->Push(calls_.back().get(), clock_.Now());
    return calls_.back().get();
  }

  BatchQueue::Verdict Look(BatchQueue::Gathering& gathering,
                           absl::Duration recent_run = absl::InfiniteDuration()) {
    return queue_->Look(gathering, clock_.Now(), recent_run, rule_);
  }

  // Takes the batch a kSend verdict allows; the calls found expired go to `expired_`.
  std::vector<ScheduledCall*> Take(BatchQueue::Gathering& gathering) {
    std::vector<ScheduledCall*> batch;
    EXPECT_TRUE(queue_->Take(gathering, clock_.Now(), batch, expired_));
    return batch;
  }

  ScheduledCall* call(int k) { return calls_[k].get(); }

  FakeClock clock_{absl::FromUnixSeconds(1000)};
  ShapeRule rule_;
  std::unique_ptr<BatchQueue> queue_;
  std::vector<std::unique_ptr<FakeCall>> calls_;
  std::vector<ScheduledCall*> expired_;
};

TEST_F(BatchFormationTest, EmptyQueueIsIdle) {
  Make(1);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kIdle);
}

TEST_F(BatchFormationTest, ShareOfQueuedAndRunningOverCollectors) {
  Make(2);
  EXPECT_EQ(queue_->Share(), 1);  // nothing at all: at least 1
  for (int k = 0; k < 3; ++k) Push(1);
  EXPECT_EQ(queue_->Share(), 2);  // ceil(3 / 2)
  queue_->StartRunning(8);
  EXPECT_EQ(queue_->Share(), 6);  // ceil(11 / 2)
  queue_->StartRunning(8);
  EXPECT_EQ(queue_->Share(), 8);  // ceil(19 / 2) = 10, capped at max_batch_size
}

TEST_F(BatchFormationTest, OneCollectorSendsEverythingQueuedAtOnce) {
  // One collector, nothing running: its share is every queued inference.
  Make(1);
  Push(1);
  Push(2);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  EXPECT_THAT(Take(gathering), ElementsAre(call(0), call(1)));
  EXPECT_TRUE(queue_->empty());
  EXPECT_EQ(queue_->running_rows(), 3);
}

TEST_F(BatchFormationTest, ShareSplitsTheQueueBetweenCollectors) {
  // Two collectors, 4 rows queued: a batch goes at 2 rows and takes no more.
  Make(2);
  for (int k = 0; k < 4; ++k) Push(1);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  EXPECT_THAT(Take(gathering), ElementsAre(call(0), call(1)));
  EXPECT_EQ(queue_->size(), 2u);
}

TEST_F(BatchFormationTest, WaitsForMaxQueueDelayBelowItsShare) {
  // Another batch of 8 runs: the share is ceil((2 + 8) / 2) = 5, so 2 rows wait for company
  // until the oldest has waited max_queue_delay (no run time known yet).
  Make(2);
  queue_->StartRunning(8);
  Push(1);
  clock_.Advance(absl::Milliseconds(3));
  Push(1);
  BatchQueue::Gathering gathering(*queue_);
  const BatchQueue::Verdict verdict = Look(gathering);
  EXPECT_EQ(verdict.step, Step::kWait);
  EXPECT_EQ(verdict.due, absl::FromUnixSeconds(1000) + kDelay);
  clock_.Advance(kDelay - absl::Milliseconds(3) - absl::Nanoseconds(1));
  EXPECT_EQ(Look(gathering).step, Step::kWait);
  clock_.Advance(absl::Nanoseconds(1));
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  EXPECT_THAT(Take(gathering), ElementsAre(call(0), call(1)));
}

TEST_F(BatchFormationTest, GathersAsLongAsARecentRunWhileAnotherBatchRuns) {
  Make(2);
  queue_->StartRunning(8);
  Push(1);
  BatchQueue::Gathering gathering(*queue_);
  const absl::Time start = clock_.Now();
  // A run of 40 ms: the batch gathers 40 ms rather than max_queue_delay's 10.
  EXPECT_EQ(Look(gathering, absl::Milliseconds(40)).due, start + absl::Milliseconds(40));
  // A run shorter than max_queue_delay: max_queue_delay.
  EXPECT_EQ(Look(gathering, absl::Milliseconds(2)).due, start + kDelay);
  // A run of 5 s: at most 100 ms.
  EXPECT_EQ(Look(gathering, absl::Seconds(5)).due, start + BatchQueue::kMaxGather);
}

TEST_F(BatchFormationTest, WithNothingRunningItGathersMaxQueueDelay) {
  // Nothing else of the version runs: max_queue_delay whatever the runs take. Shapes 0, 1, 1, 1
  // (the head merges with none): 1 row of a share of ceil(4 / 2) = 2.
  Make(2);
  Push(1, 0);
  for (int k = 0; k < 3; ++k) Push(1, 1);
  BatchQueue::Gathering gathering(*queue_);
  const BatchQueue::Verdict verdict = Look(gathering, absl::Milliseconds(40));
  EXPECT_EQ(verdict.step, Step::kWait);
  EXPECT_EQ(verdict.due, clock_.Now() + kDelay);
}

TEST_F(BatchFormationTest, AQuietVersionNeverWaits) {
  // The wait case above, but no request found the version busy for kQuietAfter.
  Make(2, {}, false, /*quiet=*/true);
  queue_->StartRunning(8);
  Push(1);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kSend);

  // Busy 19 ms ago: not quiet yet; 20 ms: quiet.
  queue_->NoteBusy(clock_.Now());
  clock_.Advance(BatchQueue::kQuietAfter - absl::Milliseconds(1));
  EXPECT_FALSE(queue_->Quiet(clock_.Now()));
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(queue_->Quiet(clock_.Now()));
}

TEST_F(BatchFormationTest, FullBatchGoesAndLeavesTheRest) {
  // Two batches of 8 run: the share is 8; the 8th row fills the batch, the 9th call stays.
  Make(2);
  queue_->StartRunning(16);
  for (int k = 0; k < 9; ++k) Push(1);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  const std::vector<ScheduledCall*> batch = Take(gathering);
  EXPECT_EQ(batch.size(), 8u);
  EXPECT_EQ(batch.front(), call(0));
  EXPECT_EQ(batch.back(), call(7));
  EXPECT_EQ(queue_->size(), 1u);
}

TEST_F(BatchFormationTest, ACallThatWouldOverfillEndsTheBatch) {
  // 5 rows then 4 rows: together 9 > 8, so the batch is full with the first alone.
  Make(2);
  queue_->StartRunning(16);
  Push(5);
  Push(4);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  EXPECT_THAT(Take(gathering), ElementsAre(call(0)));
}

TEST_F(BatchFormationTest, PreferredSizeGoesAtTheLargestOneReached) {
  // Preferred 2 and 4; 5 rows queued one by one, share ceil((5 + 8) / 2) = 7: the batch goes at
  // once, with 4 (the largest preferred size the calls make), and one call stays.
  Make(2, {2, 4});
  queue_->StartRunning(8);
  for (int k = 0; k < 5; ++k) Push(1);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  EXPECT_THAT(Take(gathering), ElementsAre(call(0), call(1), call(2), call(3)));
  EXPECT_EQ(queue_->size(), 1u);
}

TEST_F(BatchFormationTest, BelowTheSmallestPreferredSizeItWaits) {
  Make(2, {2, 4});
  queue_->StartRunning(8);
  Push(1);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kWait);
  // An arrival: the look scans it and the batch reaches the preferred size 2.
  Push(1);
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  EXPECT_THAT(Take(gathering), ElementsAre(call(0), call(1)));
}

TEST_F(BatchFormationTest, TheEarliestDeadlineMakesItDue) {
  Make(2);
  queue_->StartRunning(8);
  Push(1);
  Push(1, 0, clock_.Now() + absl::Milliseconds(3));
  Push(1);
  BatchQueue::Gathering gathering(*queue_);
  const BatchQueue::Verdict verdict = Look(gathering);
  EXPECT_EQ(verdict.step, Step::kWait);
  EXPECT_EQ(verdict.due, clock_.Now() + absl::Milliseconds(3));
  clock_.Advance(absl::Milliseconds(3));
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  // The call whose deadline came leaves to be answered alone; the others run.
  EXPECT_THAT(Take(gathering), ElementsAre(call(0), call(2)));
  EXPECT_THAT(expired_, ElementsAre(call(1)));
}

TEST_F(BatchFormationTest, SweepTakesOutExpiredAndCancelledCalls) {
  Make(2);
  Push(1);
  Push(2, 0, clock_.Now() + absl::Milliseconds(1));
  FakeCall* cancelled = Push(1);
  Push(1);
  cancelled->Cancel();
  clock_.Advance(absl::Milliseconds(1));
  queue_->Sweep(clock_.Now(), expired_);
  EXPECT_THAT(expired_, ElementsAre(call(1), call(2)));
  EXPECT_EQ(queue_->size(), 2u);
  EXPECT_EQ(queue_->Share(), 1);  // the 2 rows left over 2 collectors: their rows left too
}

TEST_F(BatchFormationTest, CallsThatDoNotMergeAreSkipped) {
  // Shapes 0, 1, 0: the batch the head leads takes the third call and leaves the second.
  Make(1);
  Push(1, 0);
  Push(1, 1);
  Push(1, 0);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kWait);  // 2 of a share of 3, not due
  clock_.Advance(kDelay);
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  EXPECT_THAT(Take(gathering), ElementsAre(call(0), call(2)));
  EXPECT_EQ(queue_->size(), 1u);
}

TEST_F(BatchFormationTest, PreserveOrderingSkipsNoCall) {
  // The same queue with preserve_ordering (one collector whatever the instances): the second
  // call does not merge, so the batch ends before it, at once.
  Make(4, {}, /*preserve_ordering=*/true);
  EXPECT_EQ(queue_->max_collectors(), 1);
  Push(1, 0);
  Push(1, 1);
  Push(1, 0);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  EXPECT_THAT(Take(gathering), ElementsAre(call(0)));
  EXPECT_EQ(queue_->size(), 2u);
}

TEST_F(BatchFormationTest, ACallThatCannotShareRunsAlone) {
  Make(2);
  queue_->StartRunning(8);
  Push(1, -1);
  Push(1, -1);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kSend);
  EXPECT_THAT(Take(gathering), ElementsAre(call(0)));
}

TEST_F(BatchFormationTest, FlushSendsWhatWaits) {
  Make(2);
  queue_->StartRunning(8);
  Push(1);
  BatchQueue::Gathering gathering(*queue_);
  EXPECT_EQ(Look(gathering).step, Step::kWait);
  queue_->Flush();
  EXPECT_EQ(Look(gathering).step, Step::kSend);
}

TEST_F(BatchFormationTest, AGatheringStartsAgainWhenCallsLeaveTheQueue) {
  // Two collectors gather at once; the second takes the head's batch, the first's members are
  // gone and its next look starts from the new head.
  Make(2);
  queue_->StartRunning(8);
  Push(1, 0);
  Push(1, 1);
  BatchQueue::Gathering first(*queue_);
  EXPECT_EQ(Look(first).step, Step::kWait);
  clock_.Advance(kDelay);
  BatchQueue::Gathering second(*queue_);
  EXPECT_EQ(Look(second).step, Step::kSend);
  EXPECT_THAT(Take(second), ElementsAre(call(0)));
  EXPECT_EQ(Look(first).step, Step::kSend);
  EXPECT_THAT(Take(first), ElementsAre(call(1)));
  EXPECT_TRUE(queue_->empty());
}

TEST_F(BatchFormationTest, TakeAllEmptiesTheQueue) {
  Make(2);
  Push(1);
  Push(3);
  EXPECT_THAT(queue_->TakeAll(), ElementsAre(call(0), call(1)));
  EXPECT_TRUE(queue_->empty());
  EXPECT_EQ(queue_->Share(), 1);
}

}  // namespace
}  // namespace loopserve::server
