// The server over the real engine: a Loop model loaded from ONNX, iteration caps, deadlines and
// cancellation inside a running Loop, and the loop metrics.

#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/server.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;

// counter.onnx: y = x + M (a Loop adding 1, M times). One worker so tests can order work.
class EngineServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repository_.MakeDir("counter/1");
    std::filesystem::copy_file(std::string(LOOPSERVE_SERVER_TEST_MODELS) + "/counter.onnx",
                               repository_.path() + "/counter/1/model.onnx");
    repository_.WriteFile("capped/config.pbtxt", "max_loop_iterations: 10");
    repository_.MakeDir("capped/1");
    std::filesystem::copy_file(std::string(LOOPSERVE_SERVER_TEST_MODELS) + "/counter.onnx",
                               repository_.path() + "/capped/1/model.onnx");
    ServerOptions options;
    options.model_repository = repository_.path();
    options.address = "127.0.0.1";
    options.grpc_port = 0;
    options.metrics_port = -1;
    options.workers = 1;
    options.max_loop_iterations = 1000;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto ready = server_->registry().Get("counter", "");
    if (!ready.ok()) GTEST_SKIP() << "the engine cannot load counter.onnx yet: " << ready.status();
    stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  static inference::ModelInferRequest Request(const std::string& model, int64_t m) {
    inference::ModelInferRequest request;
    request.set_model_name(model);
    auto* trip = request.add_inputs();
    trip->set_name("M");
    trip->set_datatype("INT64");
    trip->mutable_contents()->add_int64_contents(m);
    auto* x = request.add_inputs();
    x->set_name("x");
    x->set_datatype("FP32");
    x->add_shape(2);
    x->mutable_contents()->add_fp32_contents(0.f);
    x->mutable_contents()->add_fp32_contents(10.f);
    return request;
  }

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response, absl::Duration timeout) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return stub_->ModelInfer(&context, request, response);
  }

  // Waits until everything queued on the single worker so far has finished.
  void WaitForWorker() {
    absl::Notification done;
    ASSERT_TRUE(server_->worker_pool().TrySchedule([&] { done.Notify(); }).ok());
    done.WaitForNotification();
  }

  testing::TempDir repository_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(EngineServerTest, RunsTheLoopAndRecordsIterations) {
  inference::ModelInferResponse response;
  grpc::Status status = Infer(Request("counter", 5), &response, absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "y");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  float y[2];
  ASSERT_EQ(response.raw_output_contents(0).size(), sizeof(y));
  std::memcpy(y, response.raw_output_contents(0).data(), sizeof(y));
  EXPECT_EQ(y[0], 5.f);
  EXPECT_EQ(y[1], 15.f);
  const std::string text = server_->metrics().Serialize();
  EXPECT_THAT(text, HasSubstr("loopserve_loop_iterations_sum{loop=\"count_loop\",model=\"counter\","
                              "version=\"1\"} 5"));
  EXPECT_THAT(text, HasSubstr("loopserve_loop_iteration_duration_seconds_count{loop=\"count_loop\","
                              "model=\"counter\",version=\"1\"} 1"));
}

TEST_F(EngineServerTest, IterationCapsAnswerResourceExhausted) {
  inference::ModelInferResponse response;
  // Server-wide cap 1000.
  grpc::Status status = Infer(Request("counter", 5000), &response, absl::Seconds(30));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  // Per-model cap 10 from config.pbtxt.
  status = Infer(Request("capped", 11), &response, absl::Seconds(30));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  ASSERT_TRUE(Infer(Request("capped", 10), &response, absl::Seconds(30)).ok());
  EXPECT_THAT(server_->metrics().Serialize(),
              HasSubstr("loopserve_loop_limit_hits_total{reason=\"iteration_cap\"} 2"));
}

class UncappedEngineServerTest : public EngineServerTest {
 protected:
  void SetUp() override {
    EngineServerTest::SetUp();
    if (IsSkipped()) return;
    server_.reset();  // restart without the server-wide cap
    ServerOptions options;
    options.model_repository = repository_.path();
    options.address = "127.0.0.1";
    options.grpc_port = 0;
    options.metrics_port = -1;
    options.workers = 1;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }
};

TEST_F(UncappedEngineServerTest, DeadlineStopsARunningLoop) {
  inference::ModelInferResponse response;
  const int64_t forever = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Infer(Request("counter", forever), &response, absl::Seconds(1)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  WaitForWorker();  // the worker is free again: the loop stopped
  const std::string text = server_->metrics().Serialize();
  EXPECT_THAT(text, HasSubstr("loopserve_loop_limit_hits_total{reason=\"deadline\"} 1"));
  EXPECT_THAT(text, HasSubstr("outcome=\"deadline_exceeded\",version=\"1\"} 1"));
  ASSERT_TRUE(Infer(Request("counter", 3), &response, absl::Seconds(30)).ok());
}

TEST_F(UncappedEngineServerTest, CancellationStopsARunningLoop) {
  grpc::ClientContext context;
  inference::ModelInferRequest request = Request("counter", std::numeric_limits<int64_t>::max());
  inference::ModelInferResponse response;
  absl::Notification done;
  grpc::Status status;
  stub_->async()->ModelInfer(&context, &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  // Wait until the request is running on the worker (admitted and no longer queued).
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!(server_->metrics().inflight_requests().Value() == 1 &&
           server_->metrics().queue_depth().Value() == 0) &&
         absl::Now() < give_up) {
    std::this_thread::yield();
  }
  context.TryCancel();
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  WaitForWorker();
  const std::string text = server_->metrics().Serialize();
  EXPECT_THAT(text, HasSubstr("loopserve_loop_limit_hits_total{reason=\"cancelled\"} 1"));
  EXPECT_THAT(text, HasSubstr("outcome=\"cancelled\",version=\"1\"} 1"));
}

}  // namespace
}  // namespace loopserve::server
