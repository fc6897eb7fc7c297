// Readiness a load balancer can trust (issue 33): not ready while the queue is past
// --unready_queue_depth, and, with --drain_delay_seconds, not ready but still serving for the
// delay after a shutdown begins.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "server/server.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

class ReadinessTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options) {
    repository_.WriteFile("echo/1/model.onnx");
    options.model_loader = testing::PassthroughLoader;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  ServerOptions Options() {
    ServerOptions options = testing::LocalServerOptions(repository_.path());
    options.http_port = 0;  // REST's /v2/health/ready is what balancers check
    return options;
  }

  // The status line and body of GET /v2/health/ready.
  std::string RestReady() {
    return testing::HttpRequest(server_->http_port(), "GET", "/v2/health/ready");
  }

  bool Ready() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    inference::ServerReadyResponse response;
    EXPECT_TRUE(stub_->ServerReady(&context, {}, &response).ok());
    return response.ready();
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus Health() {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    grpc::health::v1::HealthCheckResponse response;
    EXPECT_TRUE(health->Check(&context, {}, &response).ok());
    return response.status();
  }

  grpc::Status InferEcho() {
    inference::ModelInferRequest request;
    request.set_model_name("echo");
    auto add = [&](const char* name, const char* datatype, std::vector<int64_t> shape,
                   std::string bytes) {
      auto* input = request.add_inputs();
      input->set_name(name);
      input->set_datatype(datatype);
      for (int64_t d : shape) input->add_shape(d);
      request.add_raw_input_contents(std::move(bytes));
    };
    const float x[] = {1, 2, 3, 4, 5, 6};
    const int64_t y[] = {7, 8, 9};
    add("x", "FP32", {3, 2}, std::string(reinterpret_cast<const char*>(x), sizeof(x)));
    add("y", "INT64", {3}, std::string(reinterpret_cast<const char*>(y), sizeof(y)));
    add("b", "BOOL", {}, std::string(1, '\0'));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    inference::ModelInferResponse response;
    return stub_->ModelInfer(&context, request, &response);
  }

  // Schedules a task on the pool that waits for `release`; `started` (may be null) is notified
  // when a worker runs it.
  void Occupy(absl::Notification* release, absl::Notification* started) {
    ASSERT_TRUE(server_->worker_pool()
                    .TrySchedule([release, started] {
                      if (started != nullptr) started->Notify();
                      release->WaitForNotification();
                    })
                    .ok());
  }

  TempDir repository_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(ReadinessTest, NotReadyWhileTheQueueIsPastTheThreshold) {
  ServerOptions options = Options();
  options.workers = 1;
  options.max_queue_size = 8;
  options.unready_queue_depth = 1;
  Start(options);
  ASSERT_TRUE(Ready());

  absl::Notification release, running;
  Occupy(&release, &running);  // the only worker
  running.WaitForNotification();
  Occupy(&release, nullptr);  // 1 waiting: not more than the threshold
  EXPECT_TRUE(Ready());
  EXPECT_THAT(RestReady(), HasSubstr("200 OK"));
  Occupy(&release, nullptr);  // 2 waiting
  EXPECT_FALSE(Ready());
  const std::string rest = RestReady();
  EXPECT_THAT(rest, HasSubstr("503"));
  EXPECT_THAT(rest, HasSubstr("2 requests wait for a worker (more than --unready_queue_depth=1)"));
  // The liveness probe's health is not the readiness: an overloaded replica is not restarted.
  EXPECT_EQ(Health(), grpc::health::v1::HealthCheckResponse::SERVING);

  release.Notify();
  absl::Notification drained;
  ASSERT_TRUE(server_->worker_pool().TrySchedule([&] { drained.Notify(); }).ok());
  drained.WaitForNotification();
  EXPECT_TRUE(Ready());
}

TEST_F(ReadinessTest, QueueIgnoredByDefault) {
  ServerOptions options = Options();
  options.workers = 1;
  options.max_queue_size = 8;
  Start(options);
  absl::Notification release, running;
  Occupy(&release, &running);
  running.WaitForNotification();
  for (int i = 0; i < 5; ++i) Occupy(&release, nullptr);
  EXPECT_TRUE(Ready());
  release.Notify();
  // The queued tasks borrow `release`: wait for the one worker to run them all before it goes.
  absl::Notification drained;
  ASSERT_TRUE(server_->worker_pool().TrySchedule([&] { drained.Notify(); }).ok());
  drained.WaitForNotification();
}

TEST_F(ReadinessTest, DrainDelayReportsNotReadyButStillServes) {
  ServerOptions options = Options();
  // Long enough for one request on a loaded machine; the test waits for it once.
  options.drain_delay = absl::Seconds(5);
  options.exit_timeout = absl::Seconds(5);
  Start(options);
  ASSERT_TRUE(Ready());
  ASSERT_TRUE(InferEcho().ok());

  const absl::Time shutdown_started = absl::Now();
  std::thread shutdown([this] { server_->Shutdown(); });
  // Readiness flips first thing in Shutdown; poll it (bounded) from here.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (Ready() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE(Ready());
  EXPECT_EQ(Health(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_THAT(RestReady(), HasSubstr("503"));
  const grpc::Status during_delay = InferEcho();
  const absl::Duration answered_after = absl::Now() - shutdown_started;
  if (answered_after < options.drain_delay) {
    EXPECT_TRUE(during_delay.ok()) << during_delay.error_message();
  }
  shutdown.join();
  // The delay was waited for: Shutdown did not return before it.
  EXPECT_GE(absl::Now() - shutdown_started, options.drain_delay);
}

}  // namespace
}  // namespace loopserve::server
