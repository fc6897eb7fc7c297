#include "server/server.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

absl::StatusOr<std::shared_ptr<const engine::Model>> FakeLoader(const std::string& path,
                                                                const engine::LoadOptions&) {
  if (absl::StrContains(path, "broken")) return absl::UnimplementedError("op 'Foo' unsupported");
  return testing::PassthroughModel();
}

// Starts a server on 127.0.0.1:0 over a repository with `echo` (v1, v2) and `broken` (v1).
class ServerTest : public ::testing::Test {
 protected:
  void StartServer(int workers, int max_queue_size) {
    repository_.WriteFile("echo/1/model.onnx");
    repository_.WriteFile("echo/2/model.onnx");
    repository_.WriteFile("echo/config.pbtxt", "version_policy { all {} }");
    repository_.WriteFile("broken/1/model.onnx");
    ServerOptions options = testing::LocalServerOptions(repository_.path());
    options.workers = workers;
    options.max_queue_size = max_queue_size;
    options.exit_timeout = absl::Seconds(5);
    options.model_loader = FakeLoader;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->grpc_port(), 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  void SetUp() override { StartServer(/*workers=*/2, /*max_queue_size=*/8); }

  static inference::ModelInferRequest EchoRequest() {
    inference::ModelInferRequest request;
    request.set_model_name("echo");
    request.set_id("req-42");
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
    return request;
  }

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response,
                     absl::Duration timeout = absl::Seconds(30)) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return stub_->ModelInfer(&context, request, response);
  }

  // Occupies every worker until the returned notification is notified, and waits until they are.
  std::unique_ptr<absl::Notification> BlockWorkers() {
    auto release = std::make_unique<absl::Notification>();
    WorkerPool& pool = server_->worker_pool();
    for (int i = 0; i < pool.num_workers(); ++i) {
      absl::Notification started;
      absl::Notification* r = release.get();
      EXPECT_TRUE(pool.TrySchedule([&started, r] {
                        started.Notify();
                        r->WaitForNotification();
                      })
                      .ok());
      started.WaitForNotification();
    }
    return release;
  }

  // Waits until every task queued so far on the (single-worker) pool has run.
  void WaitForQueuedTasks() {
    absl::Notification done;
    ASSERT_TRUE(server_->worker_pool().TrySchedule([&] { done.Notify(); }).ok());
    done.WaitForNotification();
  }

  TempDir repository_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(ServerTest, LiveReadyAndServerMetadata) {
  grpc::ClientContext c1, c2, c3;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(&c1, {}, &live).ok());
  EXPECT_TRUE(live.live());
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerReady(&c2, {}, &ready).ok());
  EXPECT_TRUE(ready.ready());
  inference::ServerMetadataResponse metadata;
  ASSERT_TRUE(stub_->ServerMetadata(&c3, {}, &metadata).ok());
  EXPECT_EQ(metadata.name(), "loopserve");
  EXPECT_FALSE(metadata.version().empty());
}

TEST_F(ServerTest, HealthCheckServes) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&context, request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(ServerTest, ModelReadyAndMetadata) {
  auto ready = [&](const std::string& name, const std::string& version, bool* is_ready) {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelReadyResponse response;
    grpc::Status status = stub_->ModelReady(&context, request, &response);
    *is_ready = response.ready();
    return status;
  };
  bool is_ready = false;
  ASSERT_TRUE(ready("echo", "", &is_ready).ok());
  EXPECT_TRUE(is_ready);
  ASSERT_TRUE(ready("echo", "1", &is_ready).ok());
  EXPECT_TRUE(is_ready);
  ASSERT_TRUE(ready("broken", "", &is_ready).ok());
  EXPECT_FALSE(is_ready);
  // Triton's answers: an unknown model or version is not ready (no error); a version string
  // that is no number is INVALID_ARGUMENT.
  is_ready = true;
  ASSERT_TRUE(ready("nope", "", &is_ready).ok());
  EXPECT_FALSE(is_ready);
  is_ready = true;
  ASSERT_TRUE(ready("echo", "9", &is_ready).ok());
  EXPECT_FALSE(is_ready);
  EXPECT_EQ(ready("echo", "abc", &is_ready).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext context;
  inference::ModelMetadataRequest request;
  request.set_name("echo");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(stub_->ModelMetadata(&context, request, &metadata).ok());
  EXPECT_EQ(metadata.name(), "echo");
  EXPECT_THAT(metadata.versions(), ::testing::ElementsAre("1", "2"));
  EXPECT_EQ(metadata.platform(), "onnxruntime_onnx");
  ASSERT_EQ(metadata.inputs_size(), 3);
  EXPECT_EQ(metadata.inputs(0).name(), "x");
  EXPECT_EQ(metadata.inputs(0).datatype(), "FP32");
  EXPECT_THAT(metadata.inputs(0).shape(), ::testing::ElementsAre(-1, 2));
  EXPECT_EQ(metadata.inputs(2).datatype(), "BOOL");
  EXPECT_EQ(metadata.outputs_size(), 3);
}

TEST_F(ServerTest, RepositoryIndexListsEveryVersion) {
  grpc::ClientContext context;
  inference::RepositoryIndexResponse index;
  ASSERT_TRUE(stub_->RepositoryIndex(&context, {}, &index).ok());
  ASSERT_EQ(index.models_size(), 3);
  EXPECT_EQ(index.models(0).name(), "broken");
  EXPECT_EQ(index.models(0).state(), "UNAVAILABLE");
  EXPECT_THAT(index.models(0).reason(), HasSubstr("op 'Foo' unsupported"));
  EXPECT_EQ(index.models(2).state(), "READY");
}

TEST_F(ServerTest, InferEchoesRawTensorsAndId) {
  inference::ModelInferResponse response;
  inference::ModelInferRequest request = EchoRequest();
  request.add_outputs()->set_name("y");
  request.add_outputs()->set_name("x");
  grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.id(), "req-42");
  EXPECT_EQ(response.model_name(), "echo");
  EXPECT_EQ(response.model_version(), "2");
  ASSERT_EQ(response.outputs_size(), 2);
  ASSERT_EQ(response.raw_output_contents_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "y");
  EXPECT_EQ(response.outputs(0).datatype(), "INT64");
  EXPECT_EQ(response.raw_output_contents(0), request.raw_input_contents(1));
  EXPECT_EQ(response.outputs(1).name(), "x");
  EXPECT_THAT(response.outputs(1).shape(), ::testing::ElementsAre(3, 2));
  EXPECT_EQ(response.raw_output_contents(1), request.raw_input_contents(0));
}

TEST_F(ServerTest, InferWithTypedContentsAndExplicitVersion) {
  inference::ModelInferRequest request = EchoRequest();
  request.set_model_version("1");
  request.clear_raw_input_contents();
  for (float v : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}) {
    request.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);
  }
  for (int64_t v : {7, 8, 9}) request.mutable_inputs(1)->mutable_contents()->add_int64_contents(v);
  request.mutable_inputs(2)->mutable_contents()->add_bool_contents(true);
  inference::ModelInferResponse response;
  grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model_version(), "1");
  ASSERT_EQ(response.raw_output_contents_size(), 3);
  EXPECT_EQ(response.raw_output_contents(2), std::string(1, '\1'));
  float x5;
  std::memcpy(&x5, response.raw_output_contents(0).data() + 5 * sizeof(float), sizeof(float));
  EXPECT_EQ(x5, 6.f);
}

TEST_F(ServerTest, InferErrorsMapToCodesAndTheServerKeepsServing) {
  inference::ModelInferResponse response;
  inference::ModelInferRequest request = EchoRequest();
  request.set_model_name("nope");
  EXPECT_EQ(Infer(request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
  request = EchoRequest();
  request.set_model_version("7");
  EXPECT_EQ(Infer(request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
  request = EchoRequest();
  request.set_model_name("broken");
  EXPECT_EQ(Infer(request, &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  request = EchoRequest();
  request.mutable_inputs(0)->set_datatype("INT32");
  grpc::Status status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("input 'x'"));
  request = EchoRequest();
  request.mutable_inputs(0)->set_shape(1, 3);  // the model declares [-1, 2]
  request.set_raw_input_contents(0, std::string(3 * 3 * 4, '\0'));
  status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("input 'x'"));
  request = EchoRequest();
  request.add_outputs()->set_name("zz");
  EXPECT_EQ(Infer(request, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  response.Clear();
  ASSERT_TRUE(Infer(EchoRequest(), &response).ok());
  const std::string text = server_->metrics().Serialize();
  EXPECT_THAT(
      text,
      HasSubstr(
          "loopserve_requests_total{model=\"echo\",outcome=\"invalid_argument\",protocol=\"grpc\","
          "version=\"2\"} 3"));
  EXPECT_THAT(
      text,
      HasSubstr("loopserve_requests_total{model=\"echo\",outcome=\"success\",protocol=\"grpc\","
                "version=\"2\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_inflight_requests 0"));
  EXPECT_THAT(text, HasSubstr("loopserve_queue_depth 0"));
}

// Bytes that do not parse as a ModelInferRequest: INVALID_ARGUMENT with a message (gRPC's
// generated handler would answer UNIMPLEMENTED with none); the server keeps serving.
TEST_F(ServerTest, UndecodableRequestBytesAreInvalidArgument) {
  grpc::GenericStub generic(channel_);
  for (const std::string& bytes :
       {std::string("\xff\xff\xff\xff\xff", 5), std::string("\x0a\x80\x80\x80\x80\x10", 6)}) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, "/inference.GRPCInferenceService/ModelInfer", {}, &request,
                      &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("not a valid inference.ModelInferRequest"));
  }
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(EchoRequest(), &response).ok());
  EXPECT_EQ(response.id(), "req-42");
}

// A shape of rank 200,001 is echoed abbreviated: the message stays small enough to be received.
TEST_F(ServerTest, AbsurdRankGetsABoundedMessage) {
  inference::ModelInferRequest request = EchoRequest();
  request.mutable_inputs(0)->clear_shape();
  for (int i = 0; i < 200001; ++i) request.mutable_inputs(0)->add_shape(1);
  inference::ModelInferResponse response;
  grpc::Status status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("(rank 200001)"));
  EXPECT_LT(status.error_message().size(), 1024u);
}

// What clients see about failed models names them, never the repository's path on the server.
TEST_F(ServerTest, ErrorsAndIndexReasonsNeverShowServerPaths) {
  repository_.MakeDir("nofile/1");  // a version folder without a model file
  const absl::Status load = server_->registry().Load("nofile");
  EXPECT_EQ(load.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(load.message()), HasSubstr("model 'nofile' v1"));
  EXPECT_THAT(std::string(load.message()), ::testing::Not(HasSubstr(repository_.path())));
  inference::RepositoryIndexRequest index_request;
  inference::RepositoryIndexResponse index;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->RepositoryIndex(&context, index_request, &index).ok());
  bool saw_reason = false;
  for (const auto& model : index.models()) {
    EXPECT_THAT(model.reason(), ::testing::Not(HasSubstr(repository_.path()))) << model.name();
    saw_reason = saw_reason || !model.reason().empty();
  }
  EXPECT_TRUE(saw_reason);  // `broken` reports why
  inference::ModelInferRequest request = EchoRequest();
  request.set_model_name("broken");
  inference::ModelInferResponse response;
  grpc::Status status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("model 'broken' v1"));
  EXPECT_THAT(status.error_message(), ::testing::Not(HasSubstr(repository_.path())));
}

class SingleWorkerServerTest : public ServerTest {
 protected:
  void SetUp() override { StartServer(/*workers=*/1, /*max_queue_size=*/2); }
};

TEST_F(SingleWorkerServerTest, FullQueueAnswersResourceExhaustedAtOnce) {
  std::unique_ptr<absl::Notification> release = BlockWorkers();
  // Fill the queue behind the blocked worker.
  absl::Notification a, b;
  ASSERT_TRUE(server_->worker_pool().TrySchedule([&] { a.Notify(); }).ok());
  ASSERT_TRUE(server_->worker_pool().TrySchedule([&] { b.Notify(); }).ok());
  inference::ModelInferResponse response;
  grpc::Status status = Infer(EchoRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("queue is full"));
  release->Notify();
  b.WaitForNotification();
  ASSERT_TRUE(Infer(EchoRequest(), &response).ok());
}

TEST_F(SingleWorkerServerTest, RequestExpiringInTheQueueIsNotRun) {
  std::unique_ptr<absl::Notification> release = BlockWorkers();
  inference::ModelInferResponse response;
  const absl::Time sent = absl::Now();
  // The client gives up after its deadline; the server still holds the queued call.
  EXPECT_EQ(Infer(EchoRequest(), &response, absl::Milliseconds(200)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server computes its own deadline on receipt (a little later than the client's): let it
  // pass too before the worker is freed. A clock condition, not a guessed sleep.
  while (absl::Now() < sent + absl::Milliseconds(400)) std::this_thread::yield();
  release->Notify();
  WaitForQueuedTasks();
  const std::string text = server_->metrics().Serialize();
  EXPECT_THAT(text, HasSubstr("outcome=\"deadline_exceeded\",protocol=\"grpc\",version=\"2\"} 1"));
  EXPECT_THAT(text, HasSubstr("outcome=\"success\",protocol=\"grpc\",version=\"2\"} 0"));
  EXPECT_THAT(text, HasSubstr("loopserve_inflight_requests 0"));
  ASSERT_TRUE(Infer(EchoRequest(), &response).ok());  // still serving
}

TEST_F(SingleWorkerServerTest, CancelledQueuedRequestIsNotRun) {
  std::unique_ptr<absl::Notification> release = BlockWorkers();
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  inference::ModelInferRequest request = EchoRequest();
  absl::Notification done;
  grpc::Status status;
  stub_->async()->ModelInfer(&context, &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  // Wait until the call is queued on the server (observable only through the pool), then cancel.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (server_->worker_pool().queue_size() == 0 && absl::Now() < give_up) {
    std::this_thread::yield();
  }
  ASSERT_EQ(server_->worker_pool().queue_size(), 1);
  context.TryCancel();
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // The cancellation (RST_STREAM) reaches the server asynchronously; a later call on the same
  // connection is read after it, so once that call is answered the server knows.
  grpc::ClientContext ping;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(&ping, {}, &live).ok());
  // OnCancel itself runs on gRPC's callback threads; give a loaded machine a moment for it.
  const absl::Time pinged = absl::Now();
  while (absl::Now() < pinged + absl::Milliseconds(200)) std::this_thread::yield();
  release->Notify();
  WaitForQueuedTasks();
  EXPECT_THAT(server_->metrics().Serialize(),
              HasSubstr("outcome=\"cancelled\",protocol=\"grpc\",version=\"2\"} 1"));
}

TEST_F(ServerTest, ShutdownStopsServingAndIsIdempotent) {
  server_->Shutdown();
  server_->Shutdown();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  inference::ServerLiveResponse live;
  EXPECT_FALSE(stub_->ServerLive(&context, {}, &live).ok());
}

TEST(ServerStartTest, BadOptionsAndMissingRepositoryFail) {
  ServerOptions options;
  options.address = "127.0.0.1";
  options.grpc_port = 0;
  options.metrics_port = -1;
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.model_repository = "/nonexistent/loopserve";
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kNotFound);
  TempDir empty;
  options.model_repository = empty.path();
  options.workers = 0;
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServerStartTest, BusyPortsFailCleanly) {
  TempDir empty;
  ServerOptions options;
  options.model_repository = empty.path();
  options.address = "127.0.0.1";
  options.grpc_port = 0;
  options.metrics_port = 0;
  absl::StatusOr<std::unique_ptr<Server>> first = Server::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_GT((*first)->metrics_port(), 0);

  ServerOptions same_grpc = options;
  same_grpc.grpc_port = (*first)->grpc_port();
  EXPECT_EQ(Server::Start(same_grpc).status().code(), absl::StatusCode::kUnavailable);
  ServerOptions same_metrics = options;
  same_metrics.metrics_port = (*first)->metrics_port();
  EXPECT_EQ(Server::Start(same_metrics).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace loopserve::server
