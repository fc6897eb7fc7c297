// Issue 26 part 4: no std::bad_alloc reaches the top of a server thread. Each thread's work throws
// one through the hooks tests already have (a worker task, the model loader that start-up, the
// poller and the repository RPCs call): the exception becomes a status or a log line, and the
// thread and the server go on.

#include <atomic>
#include <memory>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/observability/metrics.h"
#include "server/repository/model_repository.h"
#include "server/runner/inference_runner.h"
#include "server/scheduling/worker_pool.h"
#include "server/server.h"
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
  ServerOptions options = testing::LocalServerOptions(root.path());
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
  // The poll loads both on the loader pool, in either order: wait for both outcomes.
  const auto settled = [&] {
    return (*server)->registry().Get("later", "").ok() &&
           !absl::IsNotFound((*server)->registry().Get("oom2", "").status());
  };
  while (!settled() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));  // bounded wait for the next polls
  }
  EXPECT_TRUE((*server)->registry().Get("later", "").ok());
  EXPECT_THAT(std::string((*server)->registry().Get("oom2", "").status().message()),
              HasSubstr("std::bad_alloc"));
  (*server)->Shutdown();
}

// A call whose adapter throws std::bad_alloc where told: from Respond (on the worker that ran it)
// or from ClientGone (on the runner's watcher thread). Records how it was answered.
class ThrowingCall : public InferenceCall {
 public:
  ThrowingCall(bool throw_in_respond, bool throw_in_client_gone)
      : InferenceCall(Protocol::kGrpc, Polling::kAlways, absl::Now(), absl::InfiniteFuture()),
        throw_in_respond_(throw_in_respond),
        throw_in_client_gone_(throw_in_client_gone) {
    request.model_name = "m";
    InferenceRequest::Input x;
    x.name = "x";
    x.datatype = "FP32";
    x.shape = {1, 2};
    x.raw = absl::string_view(reinterpret_cast<const char*>(values_), sizeof(values_));
    request.inputs.push_back(std::move(x));
  }

  absl::Status Wait() {
    EXPECT_TRUE(finished_.WaitForNotificationWithTimeout(absl::Seconds(20)));
    return status_;
  }
  int finishes() const { return finishes_.load(); }
  bool was_cancelled() const { return cancelled(); }

 protected:
  absl::Status Respond(const LoadedModel&, const std::vector<int>&,
                       std::vector<engine::Value>&) override {
    if (throw_in_respond_) throw std::bad_alloc();
    return absl::OkStatus();
  }
  void Finish(const absl::Status& status) override {
    status_ = status;
    if (finishes_.fetch_add(1) == 0) finished_.Notify();
  }
  bool ClientGone() override {
    if (throw_in_client_gone_) throw std::bad_alloc();
    return false;
  }

 private:
  const bool throw_in_respond_;
  const bool throw_in_client_gone_;
  const float values_[2] = {1.f, 2.f};
  absl::Status status_;
  std::atomic<int> finishes_{0};
  absl::Notification finished_;
};

TEST(ThreadExceptionsTest, BadAllocFromAnAdapterOnAWorkerOrTheWatcherAnswersTheCallOnce) {
  testing::TempDir root;
  root.WriteFile("m/1/model.onnx");
  ModelRegistry registry({root.path(), 0,
                          [](const std::string&, const engine::LoadOptions&)
                              -> absl::StatusOr<std::shared_ptr<const engine::Model>> {
                            return testing::PassthroughModelOf(
                                {{"x", engine::DataType::kFloat32, std::vector<int64_t>{-1, 2}}});
                          },
                          nullptr});
  ASSERT_TRUE(registry.LoadAll().ok());
  ASSERT_TRUE(registry.Get("m", "").ok());
  Metrics metrics;
  WorkerPool pool(1, 16);
  InferenceRunner runner(&registry, &pool, metrics, InferenceRunner::Options());

  // On the worker: Respond throws; the call is answered INTERNAL, once, and the worker goes on.
  ThrowingCall respond_throws(/*throw_in_respond=*/true, /*throw_in_client_gone=*/false);
  runner.Submit(&respond_throws);
  const absl::Status respond_status = respond_throws.Wait();
  EXPECT_EQ(respond_status.code(), absl::StatusCode::kInternal) << respond_status;
  EXPECT_THAT(std::string(respond_status.message()), HasSubstr("std::bad_alloc"));

  // On the watcher: ClientGone throws while the call waits for the held worker; the call counts
  // as gone and is answered CANCELLED once the worker is free; the watcher goes on polling.
  absl::Notification release;
  ASSERT_TRUE(pool.TrySchedule([&] { release.WaitForNotification(); }).ok());
  ThrowingCall gone_throws(/*throw_in_respond=*/false, /*throw_in_client_gone=*/true);
  ThrowingCall fine(/*throw_in_respond=*/false, /*throw_in_client_gone=*/false);
  runner.Submit(&gone_throws);
  runner.Submit(&fine);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!gone_throws.was_cancelled() && absl::Now() < give_up) {
    absl::SleepFor(InferenceRunner::kCancelPollInterval);  // bounded wait for the watcher's poll
  }
  EXPECT_TRUE(gone_throws.was_cancelled());
  release.Notify();
  EXPECT_EQ(gone_throws.Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(fine.Wait().ok());
  EXPECT_TRUE(runner.WaitForIdle(absl::Now() + absl::Seconds(20)));
  EXPECT_EQ(respond_throws.finishes(), 1);
  EXPECT_EQ(gone_throws.finishes(), 1);
  EXPECT_EQ(fine.finishes(), 1);
}

}  // namespace
}  // namespace loopserve::server
