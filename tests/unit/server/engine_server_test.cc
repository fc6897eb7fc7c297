// The server over the real engine: a Loop model loaded from ONNX, iteration caps, deadlines and
// cancellation inside a running Loop, the loop metrics, and runs on the gRPC thread (limits,
// metrics and statistics hold for them too).

#include <cstring>
#include <filesystem>
#include <limits>
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
    repository_.WriteFile(
        "capped/config.pbtxt",
        "parameters { key: \"max_loop_iterations\" value: { string_value: \"10\" } }");
    repository_.MakeDir("capped/1");
    std::filesystem::copy_file(std::string(LOOPSERVE_SERVER_TEST_MODELS) + "/counter.onnx",
                               repository_.path() + "/capped/1/model.onnx");
    ServerOptions options = testing::LocalServerOptions(repository_.path());
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
    ServerOptions options = testing::LocalServerOptions(repository_.path());
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
  EXPECT_THAT(text, HasSubstr("outcome=\"deadline_exceeded\",protocol=\"grpc\",version=\"1\"} 1"));
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
  EXPECT_THAT(text, HasSubstr("outcome=\"cancelled\",protocol=\"grpc\",version=\"1\"} 1"));
}

// Runs on the gRPC thread (InferenceService's inline path): every run qualifies once the version
// has one timed run, so long runs can hold a slot while the test checks the limits around them.
// Two workers; `single` has instance_count 1; a queue of 1.
class InlineEngineServerTest : public EngineServerTest {
 protected:
  void SetUp() override {
    EngineServerTest::SetUp();
    if (IsSkipped()) return;
    repository_.WriteFile("single/config.pbtxt", "instance_group [ { count: 1 kind: KIND_CPU } ]");
    repository_.MakeDir("single/1");
    std::filesystem::copy_file(std::string(LOOPSERVE_SERVER_TEST_MODELS) + "/counter.onnx",
                               repository_.path() + "/single/1/model.onnx");
    server_.reset();
    ServerOptions options = testing::LocalServerOptions(repository_.path());
    options.workers = 2;
    options.max_queue_size = 1;
    options.inline_run_limit = absl::Hours(1);
    options.max_inline_runs = 2;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  // Sends `request` without waiting; `done` is notified with `status` set when it is answered.
  struct Pending {
    grpc::ClientContext context;
    inference::ModelInferRequest request;
    inference::ModelInferResponse response;
    grpc::Status status;
    absl::Notification done;
  };
  std::unique_ptr<Pending> Send(inference::ModelInferRequest request, absl::Duration timeout) {
    auto pending = std::make_unique<Pending>();
    pending->request = std::move(request);
    pending->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    Pending* p = pending.get();
    stub_->async()->ModelInfer(&p->context, &p->request, &p->response, [p](grpc::Status s) {
      p->status = std::move(s);
      p->done.Notify();
    });
    return pending;
  }

  // Waits (bounded) until `pred()` holds; polls state the server exposes only as values.
  template <typename Pred>
  static bool WaitUntil(Pred pred) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!pred() && absl::Now() < give_up) std::this_thread::yield();
    return pred();
  }
};

TEST_F(InlineEngineServerTest, ShortRunsRunInlineAndAreCountedLikeQueuedOnes) {
  inference::ModelInferResponse response;
  WorkerPool& pool = server_->worker_pool();
  // The first run of a version has no timing yet: it goes through the queue.
  ASSERT_TRUE(Infer(Request("counter", 3), &response, absl::Seconds(30)).ok());
  EXPECT_EQ(pool.ran_here(), 0);
  for (int i = 0; i < 5; ++i) {
    response.Clear();
    ASSERT_TRUE(Infer(Request("counter", 3), &response, absl::Seconds(30)).ok());
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    float y[2];
    std::memcpy(y, response.raw_output_contents(0).data(), sizeof(y));
    EXPECT_EQ(y[1], 13.f);
  }
  EXPECT_EQ(pool.ran_here(), 5);
  // The reply can reach the client before the worker slot is given back (seen once in the
  // sanitizer stage: running() was still 1), so wait for it, bounded.
  EXPECT_TRUE(WaitUntil([&] { return pool.running() == 0; }));
  const std::string text = server_->metrics().Serialize();
  EXPECT_THAT(
      text,
      HasSubstr("loopserve_requests_total{model=\"counter\",outcome=\"success\",protocol=\"grpc\","
                "version=\"1\"} 6"));
  EXPECT_THAT(text, HasSubstr("loopserve_queue_duration_seconds_count{model=\"counter\","
                              "version=\"1\"} 6"));
  EXPECT_THAT(text, HasSubstr("loopserve_compute_duration_seconds_count{model=\"counter\","
                              "version=\"1\"} 6"));
  EXPECT_THAT(text, HasSubstr("loopserve_loop_iterations_sum{loop=\"count_loop\",model=\"counter\","
                              "version=\"1\"} 18"));
  EXPECT_THAT(text, HasSubstr("loopserve_inflight_requests 0"));
  EXPECT_THAT(text, HasSubstr("loopserve_queue_depth 0"));
  const ModelVersionStatistics stats =
      (*server_->registry().Get("counter", ""))->metrics->Statistics();
  EXPECT_EQ(stats.inference_count, 6u);
  EXPECT_EQ(stats.success.count, 6u);
  EXPECT_EQ(stats.queue.count, 6u);
  EXPECT_EQ(stats.compute_infer.count, 6u);
  EXPECT_EQ(stats.compute_output.count, 6u);
  ASSERT_EQ(stats.loops.size(), 1u);
  EXPECT_EQ(stats.loops[0].execution.count, 6u);
  EXPECT_EQ(stats.loops[0].iterations, 18u);
}

TEST_F(InlineEngineServerTest, InlineRunKeepsTheInstanceCapAndItsDeadline) {
  inference::ModelInferResponse response;
  WorkerPool& pool = server_->worker_pool();
  // Both versions timed once.
  ASSERT_TRUE(Infer(Request("single", 1), &response, absl::Seconds(30)).ok());
  ASSERT_TRUE(Infer(Request("counter", 1), &response, absl::Seconds(30)).ok());
  // A worker answers before it gives its slots back: wait for that, or the next run may find
  // `single`'s only instance still taken (seen on a loaded 2-core machine).
  ASSERT_TRUE(WaitUntil([&] { return pool.running() == 0; }));
  // An endless run of `single` takes its only instance on a gRPC thread until its deadline.
  std::unique_ptr<Pending> endless =
      Send(Request("single", std::numeric_limits<int64_t>::max()), absl::Seconds(2));
  // (The worker that answered the timing runs may still be giving back its slot: wait for the
  // inline run itself.)
  ASSERT_TRUE(WaitUntil([&] { return pool.ran_here() == 1 && pool.running() == 1; }));
  // A second `single` request waits in the queue although a worker is idle ...
  std::unique_ptr<Pending> second = Send(Request("single", 1), absl::Seconds(30));
  ASSERT_TRUE(WaitUntil([&] { return pool.queue_size() == 1; }));
  // ... while another model still runs on the free slot (the queued task cannot run yet, so it
  // is not overtaken), and the full queue rejects at once.
  response.Clear();
  ASSERT_TRUE(Infer(Request("counter", 2), &response, absl::Seconds(30)).ok());
  EXPECT_EQ(pool.ran_here(), 2);
  grpc::Status full = Infer(Request("single", 1), &response, absl::Seconds(30));
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();
  EXPECT_FALSE(second->done.HasBeenNotified());
  EXPECT_EQ(pool.running(), 1);
  // The inline run stops at its deadline inside the loop; then the queued request runs.
  endless->done.WaitForNotification();
  EXPECT_EQ(endless->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  second->done.WaitForNotification();
  EXPECT_TRUE(second->status.ok()) << second->status.error_message();
  ASSERT_TRUE(WaitUntil(
      [&] { return server_->metrics().inflight_requests().Value() == 0 && pool.running() == 0; }));
  const std::string text = server_->metrics().Serialize();
  EXPECT_THAT(text, HasSubstr("loopserve_loop_limit_hits_total{reason=\"deadline\"} 1"));
  EXPECT_THAT(
      text,
      HasSubstr("loopserve_requests_total{model=\"single\",outcome=\"success\",protocol=\"grpc\","
                "version=\"1\"} 2"));
  EXPECT_THAT(text, HasSubstr("loopserve_requests_total{model=\"single\","
                              "outcome=\"deadline_exceeded\",protocol=\"grpc\",version=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_requests_total{model=\"single\","
                              "outcome=\"resource_exhausted\",protocol=\"grpc\",version=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_queue_depth 0"));
}

TEST_F(InlineEngineServerTest, TimeoutParameterAppliesToAnInlineRun) {
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(Request("counter", 1), &response, absl::Seconds(30)).ok());
  inference::ModelInferRequest request = Request("counter", std::numeric_limits<int64_t>::max());
  (*request.mutable_parameters())["timeout"].set_int64_param(300000);  // 300 ms
  const absl::Time sent = absl::Now();
  grpc::Status status = Infer(request, &response, absl::Seconds(30));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_LT(absl::Now() - sent, absl::Seconds(10));
  EXPECT_EQ(server_->worker_pool().ran_here(), 1);
}

// gRPC delivers OnCancel only after the handler returns, which an inline run would not do until
// its Loop ended: the service's watcher polls the call and stops the run.
TEST_F(InlineEngineServerTest, ClientCancelStopsAnInlineRunWithinAPoll) {
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(Request("counter", 1), &response, absl::Seconds(30)).ok());
  WorkerPool& pool = server_->worker_pool();
  std::unique_ptr<Pending> endless =
      Send(Request("counter", std::numeric_limits<int64_t>::max()), absl::Hours(1));
  // It runs on the gRPC thread (the first request, timed, went through the queue).
  ASSERT_TRUE(WaitUntil([&] { return pool.ran_here() == 1 && pool.running() == 1; }));
  absl::SleepFor(absl::Milliseconds(50));  // well inside the Loop
  const absl::Time cancelled = absl::Now();
  endless->context.TryCancel();
  ASSERT_TRUE(WaitUntil(
      [&] { return server_->metrics().inflight_requests().Value() == 0 && pool.running() == 0; }));
  const absl::Duration took = absl::Now() - cancelled;
  EXPECT_LT(took, absl::Milliseconds(100));
  std::printf("inline run cancelled: in-flight gauge 0 after %.1f ms\n",
              absl::ToDoubleMilliseconds(took));
  endless->done.WaitForNotification();
  EXPECT_EQ(endless->status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_THAT(server_->metrics().Serialize(),
              HasSubstr("loopserve_loop_limit_hits_total{reason=\"cancelled\"} 1"));
  ASSERT_TRUE(Infer(Request("counter", 2), &response, absl::Seconds(30)).ok());
}

// Shutdown after the exit timeout cancels what still runs, inline and on workers alike, so it
// returns about exit_timeout after it started whatever the Loops would do.
TEST_F(InlineEngineServerTest, ShutdownCancelsEndlessRunsAfterTheExitTimeout) {
  server_.reset();
  ServerOptions options = testing::LocalServerOptions(repository_.path());
  options.workers = 2;
  options.inline_run_limit = absl::Hours(1);
  options.max_inline_runs = 1;
  options.exit_timeout = absl::Milliseconds(500);
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->grpc_port()), grpc::InsecureChannelCredentials()));
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(Request("counter", 1), &response, absl::Seconds(30)).ok());
  WorkerPool& pool = server_->worker_pool();
  // One endless run inline (max_inline_runs 1), one on the other worker slot, one queued.
  std::vector<std::unique_ptr<Pending>> endless;
  const int64_t forever = std::numeric_limits<int64_t>::max();
  endless.push_back(Send(Request("counter", forever), absl::Hours(1)));
  ASSERT_TRUE(WaitUntil([&] { return pool.ran_here() == 1 && pool.running() == 1; }));
  endless.push_back(Send(Request("counter", forever), absl::Hours(1)));
  ASSERT_TRUE(WaitUntil([&] { return pool.running() == 2; }));
  endless.push_back(Send(Request("counter", forever), absl::Hours(1)));
  ASSERT_TRUE(WaitUntil([&] { return pool.queue_size() == 1; }));
  EXPECT_EQ(pool.ran_here(), 1);
  const absl::Time start = absl::Now();
  server_->Shutdown();
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, options.exit_timeout + absl::Milliseconds(500));
  std::printf("shutdown with 3 endless runs in flight, exit timeout 500 ms: %.0f ms\n",
              absl::ToDoubleMilliseconds(took));
  for (auto& pending : endless) {
    ASSERT_TRUE(pending->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_FALSE(pending->status.ok());
  }
  EXPECT_EQ(server_->metrics().inflight_requests().Value(), 0);
}

TEST_F(UncappedEngineServerTest, VersionsWithLongRunsGoThroughTheQueue) {
  // The default limit (1 ms): after a 50 ms run every request of the version is queued.
  inference::ModelInferResponse response;
  inference::ModelInferRequest slow = Request("counter", std::numeric_limits<int64_t>::max());
  (*slow.mutable_parameters())["timeout"].set_int64_param(50000);  // 50 ms
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(Infer(slow, &response, absl::Seconds(30)).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  ASSERT_TRUE(Infer(Request("counter", 3), &response, absl::Seconds(30)).ok());
  EXPECT_EQ(server_->worker_pool().ran_here(), 0);
}

// The dynamic batcher's batch-forming rules (InferenceRunner's class comment), with the one
// worker held so that every request is queued before the collector forms its first batch:
// matmul.onnx (y = Relu(x W), x [N, 64]) under max_batch_size 8 and a 30 s queue delay that no
// batch waits out. What each case expects follows from the rules alone: a batch is sent when
// full (8 rows), at a preferred size (the largest one the calls make), or when it holds its share
// of the version's rows (queued plus running, over one instance: everything left); calls whose
// deadline passed in the queue are answered alone and join no batch.
class BatchingEngineServerTest : public ::testing::Test {
 protected:
  void StartWith(const std::string& batching) {
    repository_.MakeDir("mm/1");
    std::filesystem::copy_file(std::string(LOOPSERVE_SERVER_TEST_MODELS) + "/matmul.onnx",
                               repository_.path() + "/mm/1/model.onnx");
    repository_.WriteFile("mm/config.pbtxt",
                          absl::StrCat("max_batch_size: 8\n"
                                       "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
                                       "dynamic_batching { max_queue_delay_microseconds: 30000000 ",
                                       batching, " }"));
    ServerOptions options = testing::LocalServerOptions(repository_.path());
    options.workers = 1;
    options.inline_run_limit = absl::ZeroDuration();  // every request through the batch queue
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  // Holds the only worker until `release` is notified; the collector task queues behind it.
  void HoldWorker() {
    ASSERT_TRUE(
        server_->worker_pool().TrySchedule([this] { release_.WaitForNotification(); }).ok());
  }

  struct Sent {
    std::thread thread;
    grpc::Status status;
    inference::ModelInferResponse response;
  };

  // Sends `count` requests of one row each, every one on its own thread, with `timeout` (and the
  // request parameter `timeout`, the server's deadline for the request, when `server_timeout`).
  void Send(int count, absl::Duration timeout,
            absl::Duration server_timeout = absl::ZeroDuration()) {
    for (int k = 0; k < count; ++k) {
      auto sent = std::make_unique<Sent>();
      Sent* out = sent.get();
      sent->thread = std::thread([this, out, timeout, server_timeout, k] {
        inference::ModelInferRequest request;
        request.set_model_name("mm");
        if (server_timeout > absl::ZeroDuration()) {
          (*request.mutable_parameters())["timeout"].set_int64_param(
              absl::ToInt64Microseconds(server_timeout));
        }
        auto* x = request.add_inputs();
        x->set_name("x");
        x->set_datatype("FP32");
        x->add_shape(1);
        x->add_shape(64);
        for (int i = 0; i < 64; ++i) x->mutable_contents()->add_fp32_contents(0.01f * (k + i));
        grpc::ClientContext context;
        context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
        out->status = stub_->ModelInfer(&context, request, &out->response);
      });
      sent_.push_back(std::move(sent));
    }
  }

  // Waits (bounded) until `count` requests are in the batch queue.
  void AwaitQueued(int count) {
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (server_->metrics().queue_depth().Value() < count && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(server_->metrics().queue_depth().Value(), count);
  }

  void ReleaseAndJoin() {
    release_.Notify();
    for (auto& sent : sent_) {
      if (sent->thread.joinable()) sent->thread.join();
    }
  }

  ModelVersionStatistics Stats() {
    return (*server_->registry().Get("mm", ""))->metrics->Statistics();
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    for (auto& sent : sent_) {
      if (sent->thread.joinable()) sent->thread.join();
    }
  }

  testing::TempDir repository_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  absl::Notification release_;
  std::vector<std::unique_ptr<Sent>> sent_;
};

TEST_F(BatchingEngineServerTest, FullBatchesGoAtOnceAndTheRestAsItsShare) {
  StartWith("");
  HoldWorker();
  Send(10, absl::Seconds(20));
  AwaitQueued(10);
  ReleaseAndJoin();
  for (const auto& sent : sent_) {
    ASSERT_TRUE(sent->status.ok()) << sent->status.error_message();
    ASSERT_EQ(sent->response.outputs_size(), 1);
    EXPECT_THAT(sent->response.outputs(0).shape(), ::testing::ElementsAre(1, 64));
  }
  // 10 queued rows: a full batch of 8, then the 2 left (all that is left is their share).
  const ModelVersionStatistics stats = Stats();
  EXPECT_EQ(stats.inference_count, 10);
  EXPECT_EQ(stats.execution_count, 2);
}

TEST_F(BatchingEngineServerTest, APreferredSizeCutsTheBatch) {
  StartWith("preferred_batch_size: [ 2, 3 ]");
  HoldWorker();
  Send(7, absl::Seconds(20));
  AwaitQueued(7);
  ReleaseAndJoin();
  for (const auto& sent : sent_) ASSERT_TRUE(sent->status.ok()) << sent->status.error_message();
  // 7 rows with preferred sizes 2 and 3: batches of 3 (the largest preferred size they make), 3,
  // then the last row alone (no preferred size, but all that is left).
  const ModelVersionStatistics stats = Stats();
  EXPECT_EQ(stats.inference_count, 7);
  EXPECT_EQ(stats.execution_count, 3);
}

TEST_F(BatchingEngineServerTest, CallsExpiredInTheQueueAreAnsweredAloneAndJoinNoBatch) {
  StartWith("");
  HoldWorker();
  constexpr absl::Duration kShort = absl::Milliseconds(100);
  Send(3, absl::Seconds(20), kShort);
  Send(4, absl::Seconds(20));
  AwaitQueued(7);
  // Every call arrived before now, so the short deadlines (the server's own clock) pass by
  // now + kShort, while the worker is held.
  absl::SleepFor(kShort + absl::Milliseconds(1));
  ReleaseAndJoin();
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(sent_[k]->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  for (int k = 3; k < 7; ++k) {
    ASSERT_TRUE(sent_[k]->status.ok()) << sent_[k]->status.error_message();
  }
  // The 4 live calls in one batch; the 3 expired ones never ran.
  const ModelVersionStatistics stats = Stats();
  EXPECT_EQ(stats.inference_count, 4);
  EXPECT_EQ(stats.execution_count, 1);
}

// A sequence_batching version refuses a request of more than one row (Triton's rule) before its
// sequence batcher sees it: INVALID_ARGUMENT, and the in-flight gauge is back at 0 (the refusal
// must not count the request out of flight without having counted it in).
TEST(SequenceEngineServerTest, ARequestOfTwoRowsIsRefusedAndLeavesNothingInFlight) {
  testing::TempDir repository;
  repository.MakeDir("seq/1");
  std::filesystem::copy_file(std::string(LOOPSERVE_SERVER_TEST_MODELS) + "/matmul.onnx",
                             repository.path() + "/seq/1/model.onnx");
  repository.WriteFile("seq/config.pbtxt", "max_batch_size: 4\nsequence_batching { }");
  absl::StatusOr<std::unique_ptr<Server>> server =
      Server::Start(testing::LocalServerOptions(repository.path()));
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->registry().Get("seq", "").ok());
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->grpc_port()), grpc::InsecureChannelCredentials()));
  inference::ModelInferRequest request;
  request.set_model_name("seq");
  (*request.mutable_parameters())["sequence_id"].set_int64_param(7);
  (*request.mutable_parameters())["sequence_start"].set_bool_param(true);
  auto* x = request.add_inputs();
  x->set_name("x");
  x->set_datatype("FP32");
  x->add_shape(2);
  x->add_shape(64);
  for (int i = 0; i < 128; ++i) x->mutable_contents()->add_fp32_contents(0.f);
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  const grpc::Status status = stub->ModelInfer(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("batch size 1"));
  EXPECT_EQ((*server)->metrics().inflight_requests().Value(), 0);
}

}  // namespace
}  // namespace loopserve::server
