#include "server/scheduling/sequence_batcher.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using engine::DataType;
using ::testing::HasSubstr;

// sum = s_in + x with x [B, 1] and the state s [1, B, 1] (batch axis 1, as Silero VAD's state);
// s_out = sum. The running sum of a sequence's inputs: which sequence's state a step read shows.
// With `corrid`, also a string input corrid [B, 1] answered as the output id = corrid.
std::shared_ptr<const engine::Model> AccumulatorModel(bool corrid = false) {
  auto graph = std::make_shared<engine::Graph>();
  auto add = [&](const std::string& name, std::vector<int64_t> dims,
                 DataType dtype = DataType::kFloat32) {
    engine::ValueType type;
    type.dtype = dtype;
    type.dims = std::move(dims);
    return graph->AddValue(name, type);
  };
  const engine::ValueId x = add("x", {-1, 1});
  const engine::ValueId s_in = add("s_in", {1, -1, 1});
  const engine::ValueId sum = add("sum", {1, -1, 1});
  const engine::ValueId s_out = add("s_out", {1, -1, 1});
  engine::Node plus;
  plus.name = "plus";
  plus.op_type = "Add";
  plus.opset = 13;
  plus.inputs = {s_in, x};
  plus.outputs = {sum};
  engine::Node copy;
  copy.name = "copy";
  copy.op_type = "Identity";
  copy.opset = 13;
  copy.inputs = {sum};
  copy.outputs = {s_out};
  graph->nodes.push_back(std::move(plus));
  graph->nodes.push_back(std::move(copy));
  graph->inputs = {x, s_in};
  graph->outputs = {sum, s_out};
  if (corrid) {
    const engine::ValueId id_in = add("corrid", {-1, 1}, DataType::kString);
    const engine::ValueId id_out = add("id", {-1, 1}, DataType::kString);
    engine::Node echo;
    echo.name = "echo";
    echo.op_type = "Identity";
    echo.opset = 13;
    echo.inputs = {id_in};
    echo.outputs = {id_out};
    graph->nodes.push_back(std::move(echo));
    graph->inputs.push_back(id_in);
    graph->outputs.push_back(id_out);
  }
  auto model = engine::Model::FromGraph(graph);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

std::unique_ptr<SequencePolicy> Policy(SequencePolicy::Strategy strategy, int slots) {
  auto policy = std::make_unique<SequencePolicy>();
  policy->strategy = strategy;
  policy->batched = true;
  policy->max_batch_size = 8;
  policy->slots = slots;
  SequencePolicy::State state;
  state.input_name = "s_in";
  state.output_name = "s_out";
  state.input = 1;
  state.output = 1;
  state.axis = 1;
  state.initial = engine::Tensor(DataType::kFloat32, engine::Shape{1, 1, 1});
  *state.initial.mutable_data<float>() = 0;
  policy->states.push_back(std::move(state));
  policy->server_inputs = {1};
  policy->output_axes = {1, 1};
  return policy;
}

// A host whose pool holds tasks until RunTasks, records each execution's member count, and
// records every answer by call.
class FakeHost {
 public:
  explicit FakeHost(std::shared_ptr<const engine::Model> model) : model_(std::move(model)) {
    host_.schedule = [this](std::function<void()> task) {
      absl::MutexLock lock(&mutex_);
      tasks_.push_back(std::move(task));
      return absl::OkStatus();
    };
    host_.run = [this](InferenceCall*, std::vector<engine::Value> inputs, absl::Time deadline,
                       const std::atomic<bool>*, int64_t members) {
      std::function<void()> during_run;
      {
        absl::MutexLock lock(&mutex_);
        executions_.push_back(members);
        during_run = during_run_;
      }
      if (during_run) during_run();
      engine::RunOptions options;
      options.deadline = deadline;
      return model_->Run(std::move(inputs), options);
    };
    host_.finish = [this](InferenceCall* call, const absl::Status& status,
                          std::vector<engine::Value>* outputs) {
      absl::MutexLock lock(&mutex_);
      Answer& answer = answers_[call];
      answer.status = status;
      if (outputs != nullptr) answer.sum = *(*outputs)[0].tensor().data<float>();
      if (outputs != nullptr && (*outputs)[1].is_tensor()) {
        answer.state = *(*outputs)[1].tensor().data<float>();
      }
      if (outputs != nullptr && outputs->size() > 2 && (*outputs)[2].is_tensor()) {
        answer.id = *(*outputs)[2].tensor().data<std::string>();
      }
    };
  }

  void RunTasks() {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mutex_);
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.erase(tasks_.begin());
      }
      task();
    }
  }

  struct Answer {
    absl::Status status = absl::UnknownError("not answered");
    float sum = -1;
    float state = -1;  // the state output s_out as the answer carried it
    std::string id;    // the output id (AccumulatorModel(true))
  };

  const SequenceHost& host() const { return host_; }
  // Called in every run, before the model runs (another thread's doing meanwhile).
  void DuringRun(std::function<void()> hook) {
    absl::MutexLock lock(&mutex_);
    during_run_ = std::move(hook);
  }
  Answer answer(int call) {
    absl::MutexLock lock(&mutex_);
    return answers_[Call(call)];
  }
  size_t pending_tasks() {
    absl::MutexLock lock(&mutex_);
    return tasks_.size();
  }
  std::vector<int64_t> executions() {
    absl::MutexLock lock(&mutex_);
    return executions_;
  }
  // A distinct opaque call pointer per number (the batcher only hands it back).
  static InferenceCall* Call(int k) {
    return reinterpret_cast<InferenceCall*>(static_cast<uintptr_t>(0x1000 + 16 * k));
  }

 private:
  std::shared_ptr<const engine::Model> model_;
  SequenceHost host_;
  absl::Mutex mutex_;
  std::vector<std::function<void()>> tasks_;
  std::vector<int64_t> executions_;
  std::function<void()> during_run_;
  std::map<InferenceCall*, Answer> answers_;
};

SequenceStep Step(int call, uint64_t id, float x, bool start = false, bool end = false) {
  SequenceStep step;
  step.call = FakeHost::Call(call);
  step.sequence.id = id;
  step.sequence.start = start;
  step.sequence.end = end;
  engine::Tensor t(DataType::kFloat32, engine::Shape{1, 1});
  *t.mutable_data<float>() = x;
  step.inputs.push_back(engine::Value(std::move(t)));
  step.inputs.emplace_back();  // s_in: the batcher's
  return step;
}

TEST(SequenceBatcherTest, OldestMergesReadyStepsAndKeepsEachSequencesState) {
  auto model = AccumulatorModel();
  FakeHost fake(model);
  auto batcher = std::make_shared<SequenceBatcher>(Policy(SequencePolicy::Strategy::kOldest, 8));
  // Four sequences start (values 1..4) and take a second step each (10, 20, 30, 40): the
  // collector held back, so each round is ready at once and runs as one execution of 4.
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE(batcher->Enqueue(Step(s, 100 + s, s + 1.0f, true), fake.host()).ok());
  }
  fake.RunTasks();
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE(batcher->Enqueue(Step(10 + s, 100 + s, 10.0f * (s + 1)), fake.host()).ok());
  }
  fake.RunTasks();
  EXPECT_EQ(fake.executions(), (std::vector<int64_t>{4, 4}));
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(fake.answer(s).sum, s + 1.0f) << s;
    EXPECT_EQ(fake.answer(10 + s).sum, (s + 1) + 10.0f * (s + 1)) << s;  // its own state only
  }
  const SequenceBatcher::Stats stats = batcher->stats();
  EXPECT_EQ(stats.live, 4);
  EXPECT_EQ(stats.steps, 8);
  EXPECT_EQ(stats.executions, 2);
}

TEST(SequenceBatcherTest, DirectRunsOneStepPerExecution) {
  FakeHost fake(AccumulatorModel());
  auto batcher = std::make_shared<SequenceBatcher>(Policy(SequencePolicy::Strategy::kDirect, 8));
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(batcher->Enqueue(Step(s, 7 + s, 2.0f, true), fake.host()).ok());
  }
  fake.RunTasks();
  EXPECT_EQ(fake.executions(), (std::vector<int64_t>{1, 1, 1}));
  for (int s = 0; s < 3; ++s) EXPECT_EQ(fake.answer(s).sum, 2.0f);
}

// The state goes from the run's output into the slot without a copy through the answer (direct:
// the output buffer becomes the slot's; oldest: the rows go straight to each slot), and an answer
// that asks for the state output gets this step's state. Three rounds, so each step reads the
// state the previous one stored.
TEST(SequenceBatcherTest, TheStateOutputIsStoredInItsSlotAndAnswered) {
  for (SequencePolicy::Strategy strategy :
       {SequencePolicy::Strategy::kDirect, SequencePolicy::Strategy::kOldest}) {
    FakeHost fake(AccumulatorModel());
    auto batcher = std::make_shared<SequenceBatcher>(Policy(strategy, 8));
    float want[3] = {0, 0, 0};
    for (int round = 0; round < 3; ++round) {
      for (int s = 0; s < 3; ++s) {
        const float x = 1.0f + s + 10.0f * round;
        ASSERT_TRUE(
            batcher->Enqueue(Step(10 * round + s, 50 + s, x, round == 0), fake.host()).ok());
        want[s] += x;
      }
      fake.RunTasks();
      for (int s = 0; s < 3; ++s) {
        const FakeHost::Answer answer = fake.answer(10 * round + s);
        ASSERT_TRUE(answer.status.ok()) << answer.status;
        EXPECT_EQ(answer.sum, want[s]) << round << " " << s;
        EXPECT_EQ(answer.state, want[s]) << round << " " << s;
      }
    }
    const std::vector<int64_t> executions = fake.executions();
    EXPECT_EQ(executions.size(), strategy == SequencePolicy::Strategy::kDirect ? 9u : 3u);
  }
}

// A string CONTROL_SEQUENCE_CORRID in merged executions: each member's row holds its own id
// (ids longer than std::string's inline buffer: rows copied as raw bytes would share, then free
// twice, their heap buffers).
TEST(SequenceBatcherTest, StringCorrIdsOfAMergedExecutionAreEachMembersOwn) {
  FakeHost fake(AccumulatorModel(/*corrid=*/true));
  std::unique_ptr<SequencePolicy> policy = Policy(SequencePolicy::Strategy::kOldest, 8);
  SequencePolicy::Control corrid;
  corrid.kind = SequencePolicy::Kind::ModelSequenceBatching_Control_Kind_CONTROL_SEQUENCE_CORRID;
  corrid.input = 2;
  corrid.dtype = DataType::kString;
  policy->controls.push_back(corrid);
  policy->server_inputs.push_back(2);
  policy->output_axes.push_back(0);
  auto batcher = std::make_shared<SequenceBatcher>(std::move(policy));
  const std::vector<std::string> ids = {"a", "a sequence id longer than any inline string buffer",
                                        "another sequence id longer than the inline buffer"};
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 0; k < ids.size(); ++k) {
      SequenceStep step = Step(10 * round + k, 0, 1.0f, round == 0);
      step.sequence.string_id = ids[k];
      step.inputs.emplace_back();  // corrid: the batcher's
      ASSERT_TRUE(batcher->Enqueue(std::move(step), fake.host()).ok());
    }
    fake.RunTasks();
    for (size_t k = 0; k < ids.size(); ++k) {
      const FakeHost::Answer answer = fake.answer(10 * round + k);
      ASSERT_TRUE(answer.status.ok()) << answer.status;
      EXPECT_EQ(answer.id, ids[k]);
      EXPECT_EQ(answer.sum, round + 1.0f);
    }
  }
  EXPECT_EQ(fake.executions(), (std::vector<int64_t>{3, 3}));
}

// One collector (one execution at a time) per instance. direct: each ready sequence may take a
// free instance; oldest: a second execution starts only for a full batch (fewer steps wait for
// the running one's next batch).
TEST(SequenceBatcherTest, ACollectorPerInstance) {
  {
    FakeHost fake(AccumulatorModel());
    std::unique_ptr<SequencePolicy> policy = Policy(SequencePolicy::Strategy::kDirect, 8);
    policy->instances = 2;
    auto batcher = std::make_shared<SequenceBatcher>(std::move(policy));
    for (int s = 0; s < 3; ++s) {
      ASSERT_TRUE(batcher->Enqueue(Step(s, 20 + s, 1.0f, true), fake.host()).ok());
    }
    EXPECT_EQ(fake.pending_tasks(), 2u);  // two instances, three ready sequences
    fake.RunTasks();
    EXPECT_EQ(fake.executions(), (std::vector<int64_t>{1, 1, 1}));
  }
  {
    FakeHost fake(AccumulatorModel());
    std::unique_ptr<SequencePolicy> policy = Policy(SequencePolicy::Strategy::kOldest, 16);
    policy->instances = 2;
    auto batcher = std::make_shared<SequenceBatcher>(std::move(policy));
    for (int s = 0; s < 3; ++s) {
      ASSERT_TRUE(batcher->Enqueue(Step(s, 40 + s, 1.0f, true), fake.host()).ok());
    }
    EXPECT_EQ(fake.pending_tasks(), 1u);  // 3 ready < max_batch_size 8: one collector
    for (int s = 3; s < 11; ++s) {
      ASSERT_TRUE(batcher->Enqueue(Step(s, 40 + s, 1.0f, true), fake.host()).ok());
    }
    EXPECT_EQ(fake.pending_tasks(), 2u);  // 11 ready: a full batch for the second instance
    fake.RunTasks();
    EXPECT_EQ(fake.executions(), (std::vector<int64_t>{8, 3}));
    for (int s = 0; s < 11; ++s) EXPECT_EQ(fake.answer(s).sum, 1.0f) << s;
  }
}

TEST(SequenceBatcherTest, StepsOfOneSequenceRunInOrderAndEndFreesTheSlot) {
  FakeHost fake(AccumulatorModel());
  auto batcher = std::make_shared<SequenceBatcher>(Policy(SequencePolicy::Strategy::kOldest, 1));
  ASSERT_TRUE(batcher->Enqueue(Step(0, 5, 1.0f, true), fake.host()).ok());
  ASSERT_TRUE(batcher->Enqueue(Step(1, 5, 2.0f), fake.host()).ok());
  ASSERT_TRUE(batcher->Enqueue(Step(2, 5, 3.0f, false, true), fake.host()).ok());
  fake.RunTasks();
  EXPECT_EQ(fake.answer(0).sum, 1.0f);
  EXPECT_EQ(fake.answer(1).sum, 3.0f);
  EXPECT_EQ(fake.answer(2).sum, 6.0f);
  EXPECT_EQ(batcher->stats().live, 0);
  // The one slot is free again: a new sequence starts from the initial state.
  ASSERT_TRUE(batcher->Enqueue(Step(3, 6, 4.0f, true), fake.host()).ok());
  fake.RunTasks();
  EXPECT_EQ(fake.answer(3).sum, 4.0f);
  // The ended id is refused, saying so.
  const absl::Status ended = batcher->Enqueue(Step(4, 5, 1.0f), fake.host());
  EXPECT_EQ(ended.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ended.message(), HasSubstr("sequence 5 is not live: it ended"));
}

TEST(SequenceBatcherTest, ARestartAbortsQueuedStepsAndStartsFromTheInitialState) {
  FakeHost fake(AccumulatorModel());
  auto batcher = std::make_shared<SequenceBatcher>(Policy(SequencePolicy::Strategy::kDirect, 2));
  ASSERT_TRUE(batcher->Enqueue(Step(0, 9, 5.0f, true), fake.host()).ok());
  ASSERT_TRUE(batcher->Enqueue(Step(1, 9, 6.0f), fake.host()).ok());
  ASSERT_TRUE(batcher->Enqueue(Step(2, 9, 7.0f, true), fake.host()).ok());  // restart
  fake.RunTasks();
  EXPECT_EQ(fake.answer(0).status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(fake.answer(1).status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(fake.answer(1).status.message(), HasSubstr("restarted"));
  EXPECT_EQ(fake.answer(2).sum, 7.0f);
  EXPECT_EQ(batcher->stats().restarts, 1);
}

TEST(SequenceBatcherTest, MoreStartsThanSlotsQueueThenAreRefused) {
  FakeHost fake(AccumulatorModel());
  auto batcher = std::make_shared<SequenceBatcher>(Policy(SequencePolicy::Strategy::kDirect, 1));
  ASSERT_TRUE(batcher->Enqueue(Step(0, 1, 1.0f, true), fake.host()).ok());
  ASSERT_TRUE(batcher->Enqueue(Step(1, 2, 1.0f, true), fake.host()).ok());  // queued
  const absl::Status full = batcher->Enqueue(Step(2, 3, 1.0f, true), fake.host());
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("all 1 sequence slots are live"));
  // The first sequence ends: the queued start takes its slot and runs.
  ASSERT_TRUE(batcher->Enqueue(Step(3, 1, 1.0f, false, true), fake.host()).ok());
  fake.RunTasks();
  EXPECT_EQ(fake.answer(1).sum, 1.0f);
  EXPECT_EQ(batcher->stats().live, 1);
}

TEST(SequenceBatcherTest, ACancelledStepIsAnsweredAndEndsItsSequence) {
  FakeHost fake(AccumulatorModel());
  auto batcher = std::make_shared<SequenceBatcher>(Policy(SequencePolicy::Strategy::kOldest, 4));
  std::atomic<bool> cancelled{true};  // the client left while the step was queued
  SequenceStep step = Step(0, 11, 1.0f, true);
  step.cancelled = &cancelled;
  ASSERT_TRUE(batcher->Enqueue(std::move(step), fake.host()).ok());
  SequenceStep late = Step(1, 12, 1.0f, true);
  late.deadline = absl::InfinitePast();  // its deadline passed in the queue
  ASSERT_TRUE(batcher->Enqueue(std::move(late), fake.host()).ok());
  fake.RunTasks();
  EXPECT_EQ(fake.answer(0).status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(fake.answer(1).status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(fake.executions().empty());  // neither ran
  const absl::Status next = batcher->Enqueue(Step(2, 11, 1.0f), fake.host());
  EXPECT_EQ(next.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(next.message(), HasSubstr("it ended when a request of it failed"));
  EXPECT_EQ(batcher->stats().live, 0);
  EXPECT_EQ(batcher->stats().failed, 2);
}

// A CONTROL_SEQUENCE_CORRID of INT32 takes numeric ids that fit 32 bits: a string id or a larger
// one is refused at Enqueue (INVALID_ARGUMENT, the step never queued).
TEST(SequenceBatcherTest, AnIdThatDoesNotFitANumericCorrIdIsRefused) {
  FakeHost fake(AccumulatorModel());
  std::unique_ptr<SequencePolicy> policy = Policy(SequencePolicy::Strategy::kDirect, 2);
  SequencePolicy::Control corrid;
  corrid.kind = SequencePolicy::Kind::ModelSequenceBatching_Control_Kind_CONTROL_SEQUENCE_CORRID;
  corrid.input = 2;
  corrid.dtype = DataType::kInt32;
  policy->controls.push_back(corrid);
  auto batcher = std::make_shared<SequenceBatcher>(std::move(policy));

  SequenceStep text = Step(0, 0, 1.0f, true);
  text.sequence.string_id = "abc";
  const absl::Status refused_text = batcher->Enqueue(std::move(text), fake.host());
  EXPECT_EQ(refused_text.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused_text.message()), HasSubstr("numeric"));

  const absl::Status refused_wide =
      batcher->Enqueue(Step(1, uint64_t{1} << 32, 1.0f, true), fake.host());
  EXPECT_EQ(refused_wide.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused_wide.message()), HasSubstr("4294967296"));
  EXPECT_EQ(batcher->stats().live, 0);
}

// Flush (the server shutting down) while a step of a sequence runs: its queued step is answered
// with the reason, the running one finishes, and then its sequence ends (the slot is free; a
// later step of the id is told why) rather than lingering until max_sequence_idle.
TEST(SequenceBatcherTest, AFlushEndsASequenceWhoseStepWasRunning) {
  FakeHost fake(AccumulatorModel());
  auto batcher = std::make_shared<SequenceBatcher>(Policy(SequencePolicy::Strategy::kDirect, 1));
  ASSERT_TRUE(batcher->Enqueue(Step(0, 9, 1.0f, true), fake.host()).ok());
  ASSERT_TRUE(batcher->Enqueue(Step(1, 9, 2.0f), fake.host()).ok());
  fake.DuringRun([&] {
    fake.DuringRun(nullptr);
    batcher->Flush(absl::UnavailableError("the server is shutting down"));
  });
  fake.RunTasks();
  EXPECT_TRUE(fake.answer(0).status.ok()) << fake.answer(0).status;
  EXPECT_EQ(fake.answer(0).sum, 1.0f);
  EXPECT_EQ(fake.answer(1).status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake.executions(), (std::vector<int64_t>{1}));
  EXPECT_EQ(batcher->stats().live, 0);
  const absl::Status next = batcher->Enqueue(Step(2, 9, 1.0f), fake.host());
  EXPECT_EQ(next.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(next.message(), HasSubstr("the server is shutting down"));
}

}  // namespace
}  // namespace loopserve::server
