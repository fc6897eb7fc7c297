// Operator-facing behaviour of the in-process server: explicit and polled model control through
// the repository RPCs, ModelStatistics, request limits, and draining on shutdown.

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
#include "proto/health.grpc.pb.h"
#include "server/server.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

class OperationsTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options) {
    options.model_repository = repository_.path();
    options.address = "127.0.0.1";
    options.grpc_port = 0;
    options.metrics_port = -1;
    options.exit_timeout = absl::Seconds(10);
    options.model_loader = testing::PassthroughLoader;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  static inference::ModelInferRequest EchoRequest(const std::string& model = "echo") {
    inference::ModelInferRequest request;
    request.set_model_name(model);
    auto add = [&](const char* name, const char* datatype, std::vector<int64_t> shape,
                   std::string bytes) {
      auto* input = request.add_inputs();
      input->set_name(name);
      input->set_datatype(datatype);
      for (int64_t d : shape) input->add_shape(d);
      request.add_raw_input_contents(std::move(bytes));
    };
    add("x", "FP32", {1, 2}, std::string(8, '\0'));
    add("y", "INT64", {3}, std::string(24, '\0'));
    add("b", "BOOL", {}, std::string(1, '\0'));
    return request;
  }

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response = nullptr) {
    inference::ModelInferResponse ignored;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return stub_->ModelInfer(&context, request, response != nullptr ? response : &ignored);
  }

  bool ModelReady(const std::string& name, const std::string& version = "") {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelReadyResponse response;
    return stub_->ModelReady(&context, request, &response).ok() && response.ready();
  }

  grpc::Status Load(const std::string& name) {
    grpc::ClientContext context;
    inference::RepositoryModelLoadRequest request;
    request.set_model_name(name);
    inference::RepositoryModelLoadResponse response;
    return stub_->RepositoryModelLoad(&context, request, &response);
  }

  grpc::Status Unload(const std::string& name) {
    grpc::ClientContext context;
    inference::RepositoryModelUnloadRequest request;
    request.set_model_name(name);
    inference::RepositoryModelUnloadResponse response;
    return stub_->RepositoryModelUnload(&context, request, &response);
  }

  inference::RepositoryIndexResponse Index() {
    grpc::ClientContext context;
    inference::RepositoryIndexResponse response;
    EXPECT_TRUE(stub_->RepositoryIndex(&context, {}, &response).ok());
    return response;
  }

  TempDir repository_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(OperationsTest, ExplicitModeLoadsOnlyWhatIsAskedAndUnloads) {
  repository_.WriteFile("echo/1/model.onnx");
  repository_.WriteFile("other/1/model.onnx");
  ServerOptions options;
  options.model_control_mode = ModelControlMode::kExplicit;
  options.load_models = {"echo"};
  Start(options);

  EXPECT_TRUE(ModelReady("echo"));
  EXPECT_FALSE(ModelReady("other"));
  EXPECT_TRUE(Infer(EchoRequest()).ok());

  ASSERT_TRUE(Unload("echo").ok());
  EXPECT_FALSE(ModelReady("echo"));
  EXPECT_EQ(Infer(EchoRequest()).error_code(), grpc::StatusCode::UNAVAILABLE);
  inference::RepositoryIndexResponse index = Index();
  // Every model of the repository, as Triton lists them: the unloaded one and the one never
  // loaded.
  ASSERT_EQ(index.models_size(), 2);
  EXPECT_EQ(index.models(0).name(), "echo");
  EXPECT_EQ(index.models(0).state(), "UNAVAILABLE");
  EXPECT_EQ(index.models(0).reason(), "unloaded");
  EXPECT_EQ(index.models(1).name(), "other");
  EXPECT_EQ(index.models(1).state(), "UNAVAILABLE");
  EXPECT_EQ(index.models(1).reason(), "not loaded");

  ASSERT_TRUE(Load("echo").ok());
  ASSERT_TRUE(Load("other").ok());
  EXPECT_TRUE(ModelReady("echo"));
  EXPECT_TRUE(Infer(EchoRequest("other")).ok());

  EXPECT_EQ(Load("nope").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Load("../echo").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Unload("nope").error_code(), grpc::StatusCode::NOT_FOUND);
  // Triton's config override (an empty ModelConfig: auto-completed) loads; a parameter that is
  // neither config nor file:<path> is refused.
  grpc::ClientContext context;
  inference::RepositoryModelLoadRequest with_override;
  with_override.set_model_name("echo");
  (*with_override.mutable_parameters())["config"].set_string_param("{}");
  inference::RepositoryModelLoadResponse response;
  EXPECT_TRUE(stub_->RepositoryModelLoad(&context, with_override, &response).ok());
  EXPECT_TRUE(ModelReady("echo"));
  grpc::ClientContext bad_context;
  (*with_override.mutable_parameters())["colour"].set_string_param("blue");
  EXPECT_EQ(stub_->RepositoryModelLoad(&bad_context, with_override, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(OperationsTest, PollModeServesANewVersionAndRefusesExplicitControl) {
  repository_.WriteFile("echo/1/model.onnx");
  ServerOptions options;
  options.repository_poll_interval = absl::Milliseconds(50);
  Start(options);
  EXPECT_EQ(Load("echo").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Unload("echo").error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  repository_.WriteFile("echo/2/model.onnx");
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!ModelReady("echo", "2") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));  // bounded poll of the server's state
  }
  ASSERT_TRUE(ModelReady("echo", "2"));
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(EchoRequest(), &response).ok());
  EXPECT_EQ(response.model_version(), "2");
}

TEST_F(OperationsTest, ModelStatisticsCountsSuccessesFailuresAndDurations) {
  repository_.WriteFile("echo/1/model.onnx");
  repository_.WriteFile("echo/config.pbtxt", "version_policy { all {} }");
  repository_.WriteFile("echo/2/model.onnx");
  Start(ServerOptions());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Infer(EchoRequest()).ok());
  inference::ModelInferRequest bad = EchoRequest();
  bad.mutable_raw_input_contents(0)->resize(3);
  EXPECT_EQ(Infer(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext context;
  inference::ModelStatisticsRequest request;
  request.set_name("echo");
  inference::ModelStatisticsResponse response;
  ASSERT_TRUE(stub_->ModelStatistics(&context, request, &response).ok());
  ASSERT_EQ(response.model_stats_size(), 2);  // every ready version
  const inference::ModelStatistics& v2 = response.model_stats(1);
  EXPECT_EQ(v2.name(), "echo");
  EXPECT_EQ(v2.version(), "2");
  EXPECT_EQ(v2.inference_count(), 3u);
  EXPECT_EQ(v2.execution_count(), 3u);
  EXPECT_GT(v2.last_inference(), 0u);
  EXPECT_EQ(v2.inference_stats().success().count(), 3u);
  EXPECT_GT(v2.inference_stats().success().ns(), 0u);
  EXPECT_EQ(v2.inference_stats().fail().count(), 1u);
  EXPECT_EQ(v2.inference_stats().queue().count(), 3u);
  EXPECT_EQ(v2.inference_stats().compute_infer().count(), 3u);
  EXPECT_EQ(v2.inference_stats().compute_input().count(), 4u);
  EXPECT_EQ(v2.inference_stats().compute_output().count(), 3u);
  EXPECT_EQ(response.model_stats(0).inference_count(), 0u);

  grpc::ClientContext all_context;
  inference::ModelStatisticsResponse all;
  ASSERT_TRUE(stub_->ModelStatistics(&all_context, {}, &all).ok());
  EXPECT_EQ(all.model_stats_size(), 2);
  grpc::ClientContext unknown_context;
  request.set_name("nope");
  EXPECT_EQ(stub_->ModelStatistics(&unknown_context, request, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(OperationsTest, OutputBytesCapMessageSizeAndTimeoutParameter) {
  repository_.WriteFile("echo/1/model.onnx");
  repository_.WriteFile("small/1/model.onnx");
  repository_.WriteFile("small/config.pbtxt",
                        "parameters { key: \"max_output_bytes\" value: { string_value: \"16\" } }");
  ServerOptions options;
  options.max_message_bytes = 4096;
  Start(options);
  EXPECT_TRUE(Infer(EchoRequest()).ok());

  grpc::Status capped = Infer(EchoRequest("small"));
  EXPECT_EQ(capped.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(capped.error_message(), HasSubstr("max_output_bytes"));
  EXPECT_THAT(server_->metrics().Serialize(),
              HasSubstr("loopserve_loop_limit_hits_total{reason=\"output_bytes\"} 1"));

  inference::ModelInferRequest big = EchoRequest();
  big.mutable_inputs(0)->set_shape(0, 1000);
  big.mutable_raw_input_contents(0)->resize(8000);
  EXPECT_EQ(Infer(big).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  inference::ModelInferRequest with_timeout = EchoRequest();
  (*with_timeout.mutable_parameters())["timeout"].set_int64_param(10'000'000);
  EXPECT_TRUE(Infer(with_timeout).ok());
  (*with_timeout.mutable_parameters())["timeout"].set_string_param("soon");
  EXPECT_EQ(Infer(with_timeout).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  (*with_timeout.mutable_parameters())["timeout"].set_int64_param(-1);
  EXPECT_EQ(Infer(with_timeout).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(OperationsTest, ShutdownAnswersNotServingAndUnavailableWhileInFlightRequestsFinish) {
  repository_.WriteFile("echo/1/model.onnx");
  ServerOptions options;
  options.workers = 1;
  Start(options);

  // Occupy the only worker, then queue one request behind it.
  absl::Notification worker_started, release_worker;
  ASSERT_TRUE(server_->worker_pool()
                  .TrySchedule([&] {
                    worker_started.Notify();
                    release_worker.WaitForNotification();
                  })
                  .ok());
  worker_started.WaitForNotification();
  grpc::Status queued_status;
  std::thread queued([&] { queued_status = Infer(EchoRequest()); });
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (server_->worker_pool().queue_size() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // bounded poll until the request is queued
  }
  ASSERT_EQ(server_->worker_pool().queue_size(), 1);

  std::thread shutdown([&] { server_->Shutdown(); });
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckResponse::ServingStatus serving =
      grpc::health::v1::HealthCheckResponse::SERVING;
  while (serving == grpc::health::v1::HealthCheckResponse::SERVING && absl::Now() < deadline) {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    if (health->Check(&context, {}, &response).ok()) serving = response.status();
  }
  EXPECT_EQ(serving, grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Infer(EchoRequest()).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(ModelReady("echo"));

  release_worker.Notify();
  queued.join();
  shutdown.join();
  EXPECT_TRUE(queued_status.ok()) << queued_status.error_message();
}

TEST(OperationsStartTest, BadOperationsOptionsFail) {
  TempDir repository;
  ServerOptions options = testing::LocalServerOptions(repository.path());
  options.tls_cert = "/nonexistent/cert.pem";
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.tls_key = "/nonexistent/key.pem";
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.tls_cert.clear();
  options.tls_key.clear();
  options.tls_client_ca = "/nonexistent/ca.pem";
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.tls_client_ca.clear();
  options.model_control_mode = ModelControlMode::kExplicit;
  options.load_models = {"missing"};
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseModelControlMode("POLL").value(), ModelControlMode::kPoll);
  EXPECT_FALSE(ParseModelControlMode("sometimes").ok());
  options.model_control_mode = ModelControlMode::kNone;
  options.load_models.clear();
  options.inline_run_limit = absl::Microseconds(-1);
  absl::Status negative = Server::Start(options).status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument) << negative;
  EXPECT_THAT(std::string(negative.message()), HasSubstr("inline_run_limit_us"));
  options.inline_run_limit = absl::Milliseconds(1);
  options.max_inline_runs = -1;
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loopserve::server
