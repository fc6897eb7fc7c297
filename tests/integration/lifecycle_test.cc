// Process lifecycle of the loopserve binary (SIGTERM drains and exits 0) and the loopctl CLI
// against a running server.

#include <signal.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_fixture.h"
#include "tests/integration/test_util.h"

namespace loopserve::testing {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<ServerProcess>> StartOwnServer(std::vector<std::string> flags) {
  return StartLoopserve(TestModelRepository(), std::move(flags));
}

TEST(LifecycleTest, SigtermExitsZero) {
  auto server = StartOwnServer({});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitForReady(absl::Seconds(60)).ok());
  auto result = (*client)->Infer("counter", {client::MakeTensor<int64_t>("M", {}, {2}),
                                             client::MakeTensor<int64_t>("start", {1}, {0})});
  ASSERT_TRUE(result.ok()) << result.status();

  ASSERT_TRUE((*server)->Signal(SIGTERM).ok());
  auto exit_code = (*server)->WaitForExit(absl::Seconds(30));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\nlog:\n" << (*server)->log();
  EXPECT_EQ(*exit_code, 0) << (*server)->log();
}

TEST(LifecycleTest, SigtermWithLoopInFlightCancelsItAndExitsZero) {
  // A 1 s drain limit: the endless loop in flight is cancelled inside the loop, then exit 0.
  auto server = StartOwnServer({"--exit_timeout_seconds=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitForReady(absl::Seconds(60)).ok());

  client::CancelToken token;  // only used to learn that the call started
  absl::Notification done;
  absl::Status status;
  std::thread caller([&] {
    client::InferOptions options;
    options.cancel = &token;
    options.timeout = absl::Seconds(60);
    status = (*client)
                 ->Infer("endless", {client::MakeTensor<int64_t>("x", {1}, {0})}, {}, options)
                 .status();
    done.Notify();
  });
  ASSERT_TRUE(token.WaitForStart(absl::Seconds(10)));
  // Make sure the request has reached the server before signalling.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    auto metrics = HttpGet((*server)->metrics_port(), "/metrics");
    if (metrics.ok() && SumMetric(metrics->body, "loopserve_inflight_requests", {}) >= 1) break;
    absl::SleepFor(absl::Milliseconds(20));  // bounded polling of a gauge
  }
  ASSERT_TRUE((*server)->Signal(SIGTERM).ok());
  auto exit_code = (*server)->WaitForExit(absl::Seconds(20));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\nlog:\n" << (*server)->log();
  EXPECT_EQ(*exit_code, 0) << (*server)->log();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  caller.join();
  EXPECT_FALSE(status.ok());
}

// loopctl as users run it: a subprocess, output on stdout, errors on stderr, exit codes.
class LoopctlTest : public LoopserveTest {
 protected:
  CommandResult Loopctl(std::vector<std::string> args) {
    args.insert(args.begin(), {LoopctlBinary(), "--addr=" + server().grpc_address()});
    auto result = RunCommand(args);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  }
};

TEST_F(LoopctlTest, LiveAndReady) {
  CommandResult live = Loopctl({"live"});
  EXPECT_EQ(live.exit_code, 0) << live.err;
  EXPECT_EQ(live.out, "live\n");
  CommandResult ready = Loopctl({"ready"});
  EXPECT_EQ(ready.exit_code, 0) << ready.err;
  EXPECT_EQ(ready.out, "ready\n");
}

TEST_F(LoopctlTest, Metadata) {
  CommandResult r = Loopctl({"metadata", "rnn"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("h0 FP32 [-1,4]"));
  EXPECT_THAT(r.out, HasSubstr("M INT64 []"));
}

TEST_F(LoopctlTest, InferInline) {
  CommandResult r = Loopctl({"infer", "counter", "--input=M:INT64::5", "--input=start:INT64:1:10"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("final INT64 [1] = [15]"));
  EXPECT_THAT(r.out, HasSubstr("counts INT64 [5,1] = [11, 12, 13, 14, 15]"));
}

TEST_F(LoopctlTest, InferFromDataDirSelectsOutput) {
  CommandResult r = Loopctl({"infer", "greedy_decoder", "--output=tokens",
                             "--data_dir=" + TestModelRepository() + "/greedy_decoder/expected"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tokens INT64 [5,1] = [3, 5, 2, 6, 0]"));
  EXPECT_EQ(r.out.find("last_token"), std::string::npos);
}

TEST_F(LoopctlTest, InferFromFile) {
  const std::string dir = TestModelRepository() + "/rnn/expected";
  CommandResult r = Loopctl({"infer", "rnn", "--input=M:" + dir + "/input_0.pb",
                             "--input=:" + dir + "/input_1.pb", "--max_elements=3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("h_seq FP32 [6,2,4] = ["));
  EXPECT_THAT(r.out, HasSubstr("... (45 more)]"));
}

TEST_F(LoopctlTest, ErrorsCarryTheGrpcCode) {
  CommandResult unknown = Loopctl({"infer", "no_such_model", "--input=x:FP32:1:0"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("error: NOT_FOUND: "));

  CommandResult deadline = Loopctl({"infer", "endless", "--input=x:INT64:1:0", "--timeout_ms=200"});
  EXPECT_EQ(deadline.exit_code, 1);
  EXPECT_THAT(deadline.err, HasSubstr("error: DEADLINE_EXCEEDED: "));

  CommandResult usage = Loopctl({"infer", "counter", "--input=M:INT64:2:1,2,3"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("INVALID_ARGUMENT"));
}

TEST_F(LoopctlTest, Perf) {
  CommandResult r = Loopctl({"perf", "rnn", "--input=M:INT64::4", "--shape=h0:3,4",
                             "--concurrency=2", "--requests=40", "--warmup=2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("40 requests, concurrency 2"));
  EXPECT_THAT(r.out, HasSubstr("throughput: "));
  EXPECT_THAT(r.out, HasSubstr("p99"));
}

TEST_F(LoopctlTest, PerfWithDefaultsFillsVariableDims) {
  CommandResult r = Loopctl({"perf", "add_scalar", "--requests=10"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("variable dim set to 1"));
  EXPECT_THAT(r.out, HasSubstr("\"p50_us\":"));
}

}  // namespace
}  // namespace loopserve::testing
