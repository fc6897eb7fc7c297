// What only a Loop server must get right, against a real loopserve process: deadlines and
// cancellation honoured inside a running Loop, the iteration cap, and Loop metrics.

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_fixture.h"
#include "tests/integration/test_util.h"

namespace loopserve::testing {
namespace {

using ::testing::HasSubstr;

client::Tensor EndlessInput() { return client::MakeTensor<int64_t>("x", {1}, {0}); }

std::vector<client::Tensor> CounterInputs(int64_t m) {
  return {client::MakeTensor<int64_t>("M", {}, {m}),
          client::MakeTensor<int64_t>("start", {1}, {0})};
}

class LoopControlTest : public LoopserveTest {
 protected:
  // Waits (bounded) until the server's loopserve_inflight_requests gauge satisfies `pred`.
  template <typename Pred>
  bool WaitForInflight(Pred pred, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      bool found = false;
      const double inflight = SumMetric(Metrics(), "loopserve_inflight_requests", {}, &found);
      if (found && pred(inflight)) return true;
      absl::SleepFor(absl::Milliseconds(20));  // polling a gauge, bounded by `timeout`
    }
    return false;
  }

  void ExpectCounterWorks() {
    client::InferOptions options;
    options.timeout = absl::Seconds(30);
    auto result = client().Infer("counter", CounterInputs(3), {}, options);
    ASSERT_TRUE(result.ok()) << result.status();
    auto final_value = client::TensorValues<int64_t>(*result->Find("final"));
    ASSERT_TRUE(final_value.ok());
    EXPECT_EQ(*final_value, std::vector<int64_t>{3});
  }
};

TEST_F(LoopControlTest, DeadlineStopsEndlessLoop) {
  client::InferOptions options;
  options.timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  auto result = client().Infer("endless", {EndlessInput()}, {}, options);
  const absl::Duration elapsed = absl::Now() - start;
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_LT(elapsed, absl::Milliseconds(1500));
  // The worker is released: the loop really stopped on the server, not only on the client.
  EXPECT_TRUE(WaitForInflight([](double v) { return v == 0; }, absl::Seconds(2)))
      << "the endless loop kept running after its deadline\n"
      << server().log();
  ExpectCounterWorks();
}

TEST_F(LoopControlTest, AbsoluteDeadlineStopsEndlessLoop) {
  client::InferOptions options;
  options.deadline = absl::Now() + absl::Milliseconds(500);
  auto result = client().Infer("endless", {EndlessInput()}, {}, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_LT(absl::Now() - options.deadline, absl::Milliseconds(500));
  ExpectCounterWorks();
}

TEST_F(LoopControlTest, RepeatedDeadlinesDoNotExhaustWorkers) {
  // More expired endless loops than workers (2): each must free its worker.
  for (int i = 0; i < 4; ++i) {
    client::InferOptions options;
    options.timeout = absl::Milliseconds(300);
    auto result = client().Infer("endless", {EndlessInput()}, {}, options);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  }
  ExpectCounterWorks();
}

TEST_F(LoopControlTest, CancelStopsEndlessLoop) {
  client::CancelToken cancel;
  absl::Notification done;
  absl::Status status;
  absl::Time finished;
  std::thread caller([&] {
    client::InferOptions options;
    options.timeout = absl::Seconds(60);
    options.cancel = &cancel;
    status = client().Infer("endless", {EndlessInput()}, {}, options).status();
    finished = absl::Now();
    done.Notify();
  });
  ASSERT_TRUE(cancel.WaitForStart(absl::Seconds(10)));
  // Cancel once the server is running it, so the cancellation has to reach a running loop.
  EXPECT_TRUE(WaitForInflight([](double v) { return v >= 1; }, absl::Seconds(5)));
  const absl::Time cancelled_at = absl::Now();
  cancel.Cancel();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  caller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_LT(finished - cancelled_at, absl::Seconds(1));
  EXPECT_TRUE(WaitForInflight([](double v) { return v == 0; }, absl::Seconds(2)))
      << "the endless loop kept running after the cancellation\n"
      << server().log();
  ExpectCounterWorks();
}

TEST_F(LoopControlTest, CancelBeforeStartNeverSends) {
  client::CancelToken cancel;
  cancel.Cancel();
  client::InferOptions options;
  options.cancel = &cancel;
  auto result = client().Infer("endless", {EndlessInput()}, {}, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
}

TEST_F(LoopControlTest, MetricsCountLoopIterations) {
  auto c = LoadExpectedCase("rnn", "expected");  // M = 6
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<std::string> labels = {"model=\"rnn\"", "version=\"1\""};
  const double count_before = SumMetric(Metrics(), "loopserve_loop_iterations_count", labels);
  const double sum_before = SumMetric(Metrics(), "loopserve_loop_iterations_sum", labels);
  auto result = client().Infer("rnn", c->inputs);
  ASSERT_TRUE(result.ok()) << result.status();

  const std::string text = Metrics();
  bool found = false;
  const double count = SumMetric(text, "loopserve_loop_iterations_count", labels, &found);
  ASSERT_TRUE(found) << "no loopserve_loop_iterations{model=\"rnn\",version=\"1\"} in:\n" << text;
  EXPECT_EQ(count - count_before, 1);
  EXPECT_EQ(SumMetric(text, "loopserve_loop_iterations_sum", labels) - sum_before, 6);
  EXPECT_THAT(text, HasSubstr("loopserve_loop_iterations_bucket{"));
  EXPECT_THAT(text, HasSubstr("loopserve_requests_total"));
}

TEST_F(LoopControlTest, MetricsCountNestedLoops) {
  auto c = LoadExpectedCase("nested", "expected");  // M = 3 outer, N = 4 inner
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<std::string> labels = {"model=\"nested\"", "version=\"1\""};
  const double sum_before = SumMetric(Metrics(), "loopserve_loop_iterations_sum", labels);
  auto result = client().Infer("nested", c->inputs);
  ASSERT_TRUE(result.ok()) << result.status();
  // 3 outer iterations + 3 inner executions of 4 iterations each.
  EXPECT_EQ(SumMetric(Metrics(), "loopserve_loop_iterations_sum", labels) - sum_before, 15);
}

// A separate server with an iteration cap.
class IterationCapTest : public LoopControlTest {
 public:
  static void SetUpTestSuite() { StartServer({"--max_loop_iterations=1000"}); }
};

TEST_F(IterationCapTest, EndlessLoopHitsCap) {
  client::InferOptions options;
  options.timeout = absl::Seconds(30);
  auto result = client().Infer("endless", {EndlessInput()}, {}, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted) << result.status();
  bool found = false;
  const double hits = SumMetric(Metrics(), "loopserve_loop_limit_hits_total", {}, &found);
  EXPECT_TRUE(found);
  EXPECT_GE(hits, 1);
  ExpectCounterWorks();
}

TEST_F(IterationCapTest, CapAllowsExactlyTheLimit) {
  auto at_cap = client().Infer("counter", CounterInputs(1000));
  ASSERT_TRUE(at_cap.ok()) << at_cap.status();
  auto final_value = client::TensorValues<int64_t>(*at_cap->Find("final"));
  ASSERT_TRUE(final_value.ok());
  EXPECT_EQ(*final_value, std::vector<int64_t>{1000});

  auto over_cap = client().Infer("counter", CounterInputs(1001));
  ASSERT_FALSE(over_cap.ok());
  EXPECT_EQ(over_cap.status().code(), absl::StatusCode::kResourceExhausted) << over_cap.status();
}

}  // namespace
}  // namespace loopserve::testing
