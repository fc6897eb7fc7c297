// Issue 26 part 4: no std::bad_alloc reaches the top of a server thread. Each thread's work throws
// one through the hooks tests already have (a worker task, the model loader that start-up, the
// poller and the repository RPCs call): the exception becomes a status or a log line, and the
// thread and the server go on.

#include <atomic>
#include <memory>
#include <new>
#include <string>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model_repository.h"
#include "server/server.h"
#include "server/worker_pool.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;

TEST(ThreadExceptionsTest, AWorkerTaskThatThrowsBadAllocLeavesTheWorkerServing) {
  WorkerPool pool(1, 8);
  ASSERT_TRUE(pool.TrySchedule([] { throw std::bad_alloc(); }).ok());
  absl::Notification ran;
  ASSERT_TRUE(pool.TrySchedule([&] { ran.Notify(); }).ok());
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(pool.num_workers(), 1);
}

// Serves the passthrough model, except that loading a path containing "oom" throws bad_alloc.
absl::StatusOr<std::shared_ptr<const engine::Model>> ThrowingLoader(const std::string& path,
                                                                    const engine::LoadOptions&) {
  if (absl::StrContains(path, "oom")) throw std::bad_alloc();
  return testing::PassthroughModel();
}

TEST(ThreadExceptionsTest, ALoaderThatThrowsBadAllocFailsThatVersionOnly) {
  testing::TempDir root;
  root.WriteFile("good/1/model.onnx");
  root.WriteFile("oom/1/model.onnx");
  ModelRegistry registry({root.path(), 0, ThrowingLoader, nullptr});
  ASSERT_TRUE(registry.LoadAll().ok());
  EXPECT_TRUE(registry.Get("good", "").ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> oom = registry.Get("oom", "1");
  EXPECT_EQ(oom.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(oom.status().message()), HasSubstr("loading the model: std::bad_alloc"));
  // A poll that meets it again (a new version) goes on with the others too.
  root.WriteFile("oom/2/model.onnx");
  root.WriteFile("later/1/model.onnx");
  ASSERT_TRUE(registry.Poll().ok());
  EXPECT_TRUE(registry.Get("later", "").ok());
  EXPECT_EQ(registry.Get("oom", "2").status().code(), absl::StatusCode::kUnavailable);
}

// Start-up (the main thread) and the repository poller (its own thread) both meet the throwing
// loader: the server starts, serves the others, picks up later models and shuts down.
TEST(ThreadExceptionsTest, StartupAndThePollerSurviveALoaderThatThrowsBadAlloc) {
  testing::TempDir root;
  root.WriteFile("good/1/model.onnx");
  root.WriteFile("oom/1/model.onnx");
  ServerOptions options;
  options.model_repository = root.path();
  options.address = "127.0.0.1";
  options.grpc_port = 0;
  options.metrics_port = -1;
  options.model_loader = ThrowingLoader;
  options.model_control_mode = ModelControlMode::kPoll;
  options.repository_poll_interval = absl::Milliseconds(50);
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->registry().Get("good", "").ok());
  EXPECT_FALSE((*server)->registry().Get("oom", "").ok());
  root.WriteFile("oom2/1/model.onnx");
  root.WriteFile("later/1/model.onnx");
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!(*server)->registry().Get("later", "").ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));  // bounded wait for the next polls
  }
  EXPECT_TRUE((*server)->registry().Get("later", "").ok());
  EXPECT_THAT(std::string((*server)->registry().Get("oom2", "").status().message()),
              HasSubstr("std::bad_alloc"));
  (*server)->Shutdown();
}

}  // namespace
}  // namespace loopserve::server
