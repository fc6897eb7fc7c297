// The IterationBatcher against the Executor contract (server/scheduling/scheduler.h), with a fake
// executor over a real WorkerPool and the decoder Loop of make_stepper_models.py: rows join a
// running batch and leave it with the tokens numpy computed for them (expected.txt, never
// loopserve's output); every call is answered exactly once, also when the admit loop throws; a
// request waiting for room in a full batch gets its deadline (by a FakeClock) or cancel answer
// while it waits.

#include "server/scheduling/iteration_batcher.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/scheduling/scheduler.h"
#include "server/scheduling/sequence_batcher.h"
#include "server/scheduling/worker_pool.h"
#include "tests/unit/engine/loop_stepper/decoder_cases.h"

namespace loopserve::server {
namespace {

using engine::DataType;
using engine::Shape;
using engine::Tensor;
using engine::Value;

using decoder_cases::kHidden;
// How long a test waits for something the batcher must do (a loaded 2-core machine).
constexpr absl::Duration kPatience = absl::Seconds(20);

std::shared_ptr<const engine::Model> Decoder() {
  auto model =
      engine::Model::Load(std::string(LOOPSERVE_STEPPER_MODELS_DIR) + "/decoder_rows/model.onnx");
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

using decoder_cases::Case;
using decoder_cases::ReadCases;

// A row that runs until it is cancelled (its trip count and budget are out of reach).
Case Endless() {
  Case c;
  c.m = int64_t{1} << 40;
  c.budget = int64_t{1} << 40;
  c.tok0 = 3;
  for (int i = 0; i < kHidden; ++i) c.h0.push_back(std::sin(0.5f + i));
  return c;
}

template <typename T>
Value Make(DataType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i) t.mutable_data<T>()[i] = values[i];
  return Value(std::move(t));
}

// A request: its inputs (M, cond, h0 [1,H], tok0 [1], budget [1]) until the batcher takes them.
class Call : public ScheduledCall {
 public:
  Call(int id, const Case& c, absl::Time deadline = absl::InfiniteFuture())
      : ScheduledCall(deadline), id_(id) {
    inputs_.push_back(Make<int64_t>(DataType::kInt64, Shape{}, {c.m}));
    inputs_.push_back(Make<bool>(DataType::kBool, Shape{}, {true}));
    inputs_.push_back(Make<float>(DataType::kFloat32, Shape{1, kHidden}, c.h0));
    inputs_.push_back(Make<int64_t>(DataType::kInt64, Shape{1}, {c.tok0}));
    inputs_.push_back(Make<int64_t>(DataType::kInt64, Shape{1}, {c.budget}));
  }
  int id() const { return id_; }
  std::vector<Value> TakeInputs() { return std::move(inputs_); }
  const std::atomic<bool>* cancel_flag() const { return &cancelled_; }

 private:
  const int id_;
  std::vector<Value> inputs_;
};

Call& Of(ScheduledCall& call) { return static_cast<Call&>(call); }

// Records what the batcher asks for; answers are kept per call id, so a second answer shows.
class FakeExecutor : public Executor {
 public:
  FakeExecutor() : pool_(1, 16) {}

  WorkerPool& pool() override { return pool_; }
  absl::Duration inline_run_limit() const override { return absl::ZeroDuration(); }
  void RunAlone(ScheduledCall&) override { ADD_FAILURE() << "RunAlone"; }
  void RunHere(ScheduledCall&) override { ADD_FAILURE() << "RunHere"; }
  void RunMerged(absl::Span<ScheduledCall* const>) override { ADD_FAILURE() << "RunMerged"; }
  void Reject(ScheduledCall&, const absl::Status&) override { ADD_FAILURE() << "Reject"; }
  void WatchWhileHere(ScheduledCall&) override { ADD_FAILURE() << "WatchWhileHere"; }
  void Queued(ScheduledCall&) override { ADD_FAILURE() << "Queued"; }
  void Unqueued(ScheduledCall& call) override {
    absl::MutexLock lock(&mutex_);
    unqueued_.push_back(Of(call).id());
  }
  bool Mergeable(const ScheduledCall&) const override { return false; }
  bool CanMerge(const ScheduledCall&, const ScheduledCall&) const override { return false; }
  absl::StatusOr<SequenceStep> TakeStep(ScheduledCall&, const SequencePolicy&) override {
    ADD_FAILURE() << "TakeStep";
    return absl::InternalError("TakeStep");
  }
  const SequenceHost& sequence_host() const override {
    ADD_FAILURE() << "sequence_host";
    return sequence_host_;
  }

  RowRequest TakeRow(ScheduledCall& call) override {
    RowRequest row;
    row.call = &call;
    row.inputs = Of(call).TakeInputs();
    row.options.deadline = call.deadline();
    row.options.cancelled = Of(call).cancel_flag();
    return row;
  }
  void RowStarted(ScheduledCall& call) override {
    bool fail = false;
    {
      absl::MutexLock lock(&mutex_);
      started_.push_back(Of(call).id());
      fail = Of(call).id() == throw_on_start_;
    }
    if (fail) throw std::runtime_error("RowStarted failed");
  }
  void FinishRow(ScheduledCall& call, absl::StatusOr<std::vector<Value>> outputs) override {
    absl::MutexLock lock(&mutex_);
    Answer& answer = answers_[Of(call).id()];
    if (answer.count++ == 0) answer.first = std::move(outputs);
  }

  // RowStarted of call `id` throws (as an admit step of the driver may).
  void ThrowOnStart(int id) {
    absl::MutexLock lock(&mutex_);
    throw_on_start_ = id;
  }
  // Waits for call `id`'s first answer and takes it (once per call); UNKNOWN when none came.
  absl::StatusOr<std::vector<Value>> AwaitAnswer(int id) {
    absl::MutexLock lock(&mutex_);
    auto answered = [this, id]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return answers_.count(id) > 0; };
    if (!mutex_.AwaitWithTimeout(absl::Condition(&answered), kPatience)) {
      return absl::UnknownError("no answer");
    }
    return std::move(answers_[id].first);
  }
  bool AwaitStarted(int id) {
    absl::MutexLock lock(&mutex_);
    auto started = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      for (int s : started_) {
        if (s == id) return true;
      }
      return false;
    };
    return mutex_.AwaitWithTimeout(absl::Condition(&started), kPatience);
  }
  int answers(int id) {
    absl::MutexLock lock(&mutex_);
    return answers_.count(id) > 0 ? answers_[id].count : 0;
  }
  std::vector<int> unqueued() {
    absl::MutexLock lock(&mutex_);
    return unqueued_;
  }
  // Waits for every driver to end.
  void Drain() { pool_.Shutdown(); }

 private:
  struct Answer {
    int count = 0;  // FinishRow calls: 1 when answered exactly once
    absl::StatusOr<std::vector<Value>> first = absl::UnknownError("taken");
  };

  WorkerPool pool_;
  const SequenceHost sequence_host_;
  absl::Mutex mutex_;
  std::map<int, Answer> answers_ ABSL_GUARDED_BY(mutex_);
  std::vector<int> started_ ABSL_GUARDED_BY(mutex_);
  std::vector<int> unqueued_ ABSL_GUARDED_BY(mutex_);
  int throw_on_start_ ABSL_GUARDED_BY(mutex_) = -1;
};

std::shared_ptr<IterationBatcher> Batcher(int max_rows, int max_queue = 16,
                                          const Clock* clock = &Clock::Real()) {
  IterationBatcher::Options options;
  options.max_rows = max_rows;
  options.instances = 1;
  options.max_queue = max_queue;
  options.label = "model 'decoder' v1: ";
  options.clock = clock;
  auto batcher = IterationBatcher::Create(Decoder(), options);
  EXPECT_TRUE(batcher.ok()) << batcher.status();
  return batcher.ok() ? *batcher : nullptr;
}

void ExpectNumpy(const absl::StatusOr<std::vector<Value>>& outputs, const Case& c,
                 const std::string& what) {
  ASSERT_TRUE(outputs.ok()) << what << ": " << outputs.status();
  const Tensor& tokens = (*outputs)[3].tensor();
  ASSERT_EQ(tokens.NumElements(), static_cast<int64_t>(c.tokens.size())) << what;
  for (size_t t = 0; t < c.tokens.size(); ++t) {
    EXPECT_EQ(tokens.data<int64_t>()[t], c.tokens[t]) << what << " token " << t;
  }
  const Tensor& h = (*outputs)[0].tensor();
  for (int i = 0; i < kHidden; ++i) {
    EXPECT_NEAR(h.data<float>()[i], c.h_final[i], 1e-5 * std::fabs(c.h_final[i]) + 1e-6) << what;
  }
}

// Waits until the running batches have run `steps` more iterations.
void AwaitSteps(const IterationBatcher& batcher, int64_t steps) {
  const int64_t until = batcher.iteration_stats().steps + steps;
  const absl::Time give_up = absl::Now() + kPatience;
  while (batcher.iteration_stats().steps < until && absl::Now() < give_up) {
    absl::SleepFor(absl::Microseconds(200));
  }
  ASSERT_GE(batcher.iteration_stats().steps, until);
}

TEST(IterationBatcherTest, RowsJoinARunningBatchAndLeaveWithTheirOwnResults) {
  const std::vector<Case> cases = ReadCases();
  ASSERT_GE(cases.size(), 4u);
  FakeExecutor executor;
  auto batcher = Batcher(/*max_rows=*/8);
  ASSERT_NE(batcher, nullptr);
  Call endless(100, Endless());
  ASSERT_TRUE(batcher->Enqueue(endless, executor).ok());
  ASSERT_TRUE(executor.AwaitStarted(100));
  // Four requests join the running batch and leave it when their own Loops end.
  std::vector<std::unique_ptr<Call>> calls;
  for (int c = 0; c < 4; ++c) {
    calls.push_back(std::make_unique<Call>(c, cases[c]));
    ASSERT_TRUE(batcher->Enqueue(*calls.back(), executor).ok());
  }
  for (int c = 0; c < 4; ++c)
    ExpectNumpy(executor.AwaitAnswer(c), cases[c], "case " + std::to_string(c));
  EXPECT_EQ(executor.answers(100), 0);  // still running
  EXPECT_GE(batcher->stats().running_rows, 1);
  EXPECT_EQ(batcher->stats().collectors, 1);
  endless.Cancel();
  EXPECT_TRUE(absl::IsCancelled(executor.AwaitAnswer(100).status()));
  executor.Drain();
  const IterationBatchingStats stats = batcher->iteration_stats();
  EXPECT_EQ(stats.rows_admitted, 5);
  EXPECT_EQ(stats.rows_retired, 5);
  EXPECT_GE(stats.peak_rows, 2);  // the cases joined the endless row's batch
  EXPECT_EQ(batcher->stats().collectors, 0);
  EXPECT_EQ(batcher->stats().running_rows, 0);
  for (int id : {0, 1, 2, 3, 100}) EXPECT_EQ(executor.answers(id), 1) << id;
}

TEST(IterationBatcherTest, EveryCallIsAnsweredOnceWhenTheAdmitLoopThrows) {
  const std::vector<Case> cases = ReadCases();
  ASSERT_GE(cases.size(), 4u);
  FakeExecutor executor;
  auto batcher = Batcher(/*max_rows=*/8);
  ASSERT_NE(batcher, nullptr);
  // The one worker waits at a gate, so the driver finds all three calls queued and takes them
  // into one admit loop, whose second RowStarted throws.
  absl::Notification gate;
  ASSERT_TRUE(executor.pool().TrySchedule([&gate] { gate.WaitForNotification(); }).ok());
  std::vector<std::unique_ptr<Call>> calls;
  for (int c = 0; c < 3; ++c) {
    calls.push_back(std::make_unique<Call>(c, cases[c]));
    ASSERT_TRUE(batcher->Enqueue(*calls.back(), executor).ok());
  }
  EXPECT_EQ(batcher->stats().queued, 3);
  executor.ThrowOnStart(1);
  gate.Notify();
  for (int c = 0; c < 3; ++c) {
    const absl::Status status = executor.AwaitAnswer(c).status();
    EXPECT_TRUE(absl::IsInternal(status)) << c << ": " << status;
  }
  // The batcher still serves: once the failed driver is gone (a call queued before that is
  // answered with its failure), a new driver and stepper take the next call.
  const absl::Time give_up = absl::Now() + kPatience;
  while (batcher->stats().collectors > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Microseconds(200));
  }
  ASSERT_EQ(batcher->stats().collectors, 0);
  Call next(3, cases[3]);
  ASSERT_TRUE(batcher->Enqueue(next, executor).ok());
  ExpectNumpy(executor.AwaitAnswer(3), cases[3], "after the throw");
  executor.Drain();
  for (int c = 0; c < 4; ++c) EXPECT_EQ(executor.answers(c), 1) << c;
  EXPECT_EQ(batcher->stats().collectors, 0);
  EXPECT_EQ(batcher->stats().queued, 0);
}

TEST(IterationBatcherTest, AWaitingRequestIsAnsweredAtItsDeadlineOrCancelWhileTheBatchRuns) {
  FakeClock clock(absl::Now());
  FakeExecutor executor;
  auto batcher = Batcher(/*max_rows=*/1, /*max_queue=*/16, &clock);
  ASSERT_NE(batcher, nullptr);
  Call endless(100, Endless());
  ASSERT_TRUE(batcher->Enqueue(endless, executor).ok());
  ASSERT_TRUE(executor.AwaitStarted(100));
  // The batch is full: these two wait for room.
  Call timed(1, Endless(), clock.Now() + absl::Hours(1));
  Call cancelled(2, Endless());
  ASSERT_TRUE(batcher->Enqueue(timed, executor).ok());
  ASSERT_TRUE(batcher->Enqueue(cancelled, executor).ok());
  AwaitSteps(*batcher, 20);
  EXPECT_EQ(executor.answers(1), 0);
  EXPECT_EQ(executor.answers(2), 0);
  EXPECT_EQ(batcher->stats().queued, 2);

  clock.Advance(absl::Hours(2));
  EXPECT_TRUE(absl::IsDeadlineExceeded(executor.AwaitAnswer(1).status()));
  cancelled.Cancel();
  clock.Advance(2 * IterationBatcher::kWaitCheckInterval);
  EXPECT_TRUE(absl::IsCancelled(executor.AwaitAnswer(2).status()));
  EXPECT_EQ(executor.answers(100), 0);  // the running row went on meanwhile
  EXPECT_EQ(batcher->stats().queued, 0);

  endless.Cancel();
  EXPECT_TRUE(absl::IsCancelled(executor.AwaitAnswer(100).status()));
  executor.Drain();
  EXPECT_EQ(batcher->iteration_stats().rows_admitted, 1);  // the waiting two never ran
  for (int id : {1, 2, 100}) EXPECT_EQ(executor.answers(id), 1) << id;
}

TEST(IterationBatcherTest, AFullQueueRefusesAndFlushAnswersTheQueued) {
  FakeExecutor executor;
  auto batcher = Batcher(/*max_rows=*/1, /*max_queue=*/1);
  ASSERT_NE(batcher, nullptr);
  Call endless(100, Endless());
  ASSERT_TRUE(batcher->Enqueue(endless, executor).ok());
  ASSERT_TRUE(executor.AwaitStarted(100));
  Call queued(1, Endless());
  ASSERT_TRUE(batcher->Enqueue(queued, executor).ok());
  // The queue holds max_queue requests: the next is refused and is the caller's again.
  Call refused(2, Endless());
  const absl::Status full = batcher->Enqueue(refused, executor);
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_NE(full.message().find("model 'decoder' v1: "), absl::string_view::npos) << full;
  EXPECT_EQ(executor.unqueued(), std::vector<int>{2});
  // Shutdown: the queued request is answered now, the running one goes on.
  batcher->Flush();
  EXPECT_TRUE(absl::IsCancelled(executor.AwaitAnswer(1).status()));
  EXPECT_EQ(executor.answers(100), 0);
  endless.Cancel();
  EXPECT_TRUE(absl::IsCancelled(executor.AwaitAnswer(100).status()));
  executor.Drain();
  EXPECT_EQ(executor.answers(1), 1);
  EXPECT_EQ(executor.answers(2), 0);
}

TEST(IterationBatcherTest, APoolThatRefusesTheDriverAnswersTheCall) {
  FakeExecutor executor;
  auto batcher = Batcher(/*max_rows=*/4);
  ASSERT_NE(batcher, nullptr);
  executor.Drain();  // the pool takes no task any more
  Call call(1, Endless());
  EXPECT_TRUE(batcher->Enqueue(call, executor).ok());
  const absl::Status status = executor.AwaitAnswer(1).status();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_EQ(executor.answers(1), 1);
  EXPECT_EQ(batcher->stats().collectors, 0);
  EXPECT_EQ(batcher->stats().queued, 0);
}

}  // namespace
}  // namespace loopserve::server
