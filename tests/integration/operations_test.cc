// Production behaviour of the real loopserve binary (issue 5): hostile requests, a load test of
// 32 concurrent clients, a version dropped into the repository under traffic, a failed load that
// keeps the previous version serving, explicit model control, ModelStatistics, the timeout
// parameter, the output-bytes cap, SIGTERM during a long Loop, and TLS / mutual TLS.

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "tests/integration/server_process.h"
#include "tests/integration/test_util.h"

namespace loopserve::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::unique_ptr<inference::GRPCInferenceService::Stub> Stub(const ServerProcess& server) {
  return inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(server.grpc_address(), grpc::InsecureChannelCredentials()));
}

std::vector<client::Tensor> CounterInputs(int64_t m) {
  return {client::MakeTensor<int64_t>("M", {}, {m}),
          client::MakeTensor<int64_t>("start", {1}, {0})};
}

// A repository holding only `counter` version 1 (a copy of the test model).
std::string CounterRepository() {
  const std::string root = MakeScratchDir("repo");
  fs::create_directories(root + "/counter/1");
  fs::copy_file(TestModelRepository() + "/counter/1/model.onnx", root + "/counter/1/model.onnx");
  return root;
}

// Places `version` of counter into `root` atomically: written beside, then renamed into place.
void DropVersion(const std::string& root, int version, const std::string* contents = nullptr) {
  const std::string staging = absl::StrCat(root, "/counter/.staging", version);
  fs::create_directories(staging);
  if (contents == nullptr) {
    fs::copy_file(TestModelRepository() + "/counter/1/model.onnx", staging + "/model.onnx");
  } else {
    std::ofstream(staging + "/model.onnx") << *contents;
  }
  fs::rename(staging, absl::StrCat(root, "/counter/", version));
}

// The first INT64 value of `t`, or -1.
int64_t FirstInt64(const client::Tensor* t) {
  if (t == nullptr) return -1;
  absl::StatusOr<std::vector<int64_t>> values = client::TensorValues<int64_t>(*t);
  return values.ok() && !values->empty() ? values->front() : -1;
}

int64_t Percentile(std::vector<int64_t> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[index];
}

struct SignalledExit {
  int code;
  absl::Duration took;  // from the signal to the exit
};

// Sends SIGTERM and waits (30 s at most) for the process to exit; an error (with the server's
// log) when the signal could not be sent or the process did not exit.
absl::StatusOr<SignalledExit> SigtermAndWait(ServerProcess& server) {
  const absl::Time signalled = absl::Now();
  if (absl::Status s = server.Signal(SIGTERM); !s.ok()) return s;
  absl::StatusOr<int> exit_code = server.WaitForExit(absl::Seconds(30));
  const absl::Duration took = absl::Now() - signalled;
  if (!exit_code.ok()) {
    return absl::Status(exit_code.status().code(),
                        absl::StrCat(exit_code.status().message(), "\nlog:\n", server.log()));
  }
  return SignalledExit{*exit_code, took};
}

TEST(OperationsTest, HostileRequestsGetTheRightCodesAndTheServerSurvives) {
  auto server = StartLoopserve(TestModelRepository(), {});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitForReady(absl::Seconds(60)).ok());

  for (const std::string& name : {std::string("../counter"), std::string("/etc/passwd"),
                                  std::string("counter/../counter"), std::string("..")}) {
    auto result = (*client)->Infer(name, CounterInputs(2));
    EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound) << name;
    auto ready = (*client)->ModelReady(name);
    EXPECT_FALSE(ready.value_or(true)) << name;  // Triton's answer: not ready, no error
  }
  auto newline = (*client)->Infer("a\nb" + std::string(10000, 'x'), CounterInputs(2));
  EXPECT_EQ(newline.status().code(), absl::StatusCode::kNotFound);
  EXPECT_LT(newline.status().message().size(), 300u);

  auto request = [] {
    inference::ModelInferRequest r;
    r.set_model_name("counter");
    auto* m = r.add_inputs();
    m->set_name("M");
    m->set_datatype("INT64");
    auto* start = r.add_inputs();
    start->set_name("start");
    start->set_datatype("INT64");
    start->add_shape(1);
    r.add_raw_input_contents(std::string(8, '\0'));
    r.add_raw_input_contents(std::string(8, '\0'));
    return r;
  };
  ASSERT_TRUE((*client)->InferRaw(request()).ok());
  inference::ModelInferRequest wrong_dtype = request();
  wrong_dtype.mutable_inputs(0)->set_datatype("FP32");
  wrong_dtype.set_raw_input_contents(0, std::string(4, '\0'));
  inference::ModelInferRequest short_raw = request();
  short_raw.set_raw_input_contents(1, std::string(3, '\0'));
  inference::ModelInferRequest absurd = request();
  absurd.mutable_inputs(1)->set_shape(0, int64_t{1} << 62);
  absurd.mutable_inputs(1)->add_shape(int64_t{1} << 62);
  inference::ModelInferRequest missing = request();
  missing.mutable_inputs()->RemoveLast();
  missing.mutable_raw_input_contents()->RemoveLast();
  for (const auto* bad : {&wrong_dtype, &short_raw, &absurd, &missing}) {
    EXPECT_EQ((*client)->InferRaw(*bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad->DebugString();
  }
  // Errors never echo payloads: the raw bytes below must not come back.
  inference::ModelInferRequest secret = request();
  secret.set_raw_input_contents(1, "SECRETPAYLOAD");
  auto secret_result = (*client)->InferRaw(secret);
  EXPECT_EQ(secret_result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(secret_result.status().message()).find("SECRET"), std::string::npos);

  auto live = (*client)->ServerLive();
  ASSERT_TRUE(live.ok() && *live);
  ASSERT_TRUE((*client)->InferRaw(request()).ok());
  EXPECT_EQ((*server)->log().find("SECRET"), std::string::npos);
}

TEST(OperationsTest, LoadTest32ClientsTimes100RequestsWithoutError) {
  auto server = StartLoopserve(TestModelRepository(), {});
  ASSERT_TRUE(server.ok()) << server.status();
  constexpr int kClients = 32, kRequests = 100;
  std::vector<std::unique_ptr<client::Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    auto c = client::Client::Create((*server)->grpc_address());
    ASSERT_TRUE(c.ok());
    clients.push_back(*std::move(c));
  }
  ASSERT_TRUE(clients[0]->WaitForReady(absl::Seconds(60)).ok());

  std::atomic<int> failures{0};
  absl::Mutex mu;
  std::vector<int64_t> latencies_us;
  std::string first_error;
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      std::vector<int64_t> mine;
      for (int r = 0; r < kRequests; ++r) {
        const absl::Time t0 = absl::Now();
        auto result = clients[i]->Infer("counter", CounterInputs(5));
        mine.push_back(absl::ToInt64Microseconds(absl::Now() - t0));
        if (!result.ok() || FirstInt64(result->Find("final")) != 5) {
          if (failures.fetch_add(1) == 0) {
            absl::MutexLock lock(&mu);
            first_error = result.ok() ? "wrong output" : result.status().ToString();
          }
        }
      }
      absl::MutexLock lock(&mu);
      latencies_us.insert(latencies_us.end(), mine.begin(), mine.end());
    });
  }
  for (std::thread& t : threads) t.join();
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(failures.load(), 0) << first_error;
  ASSERT_EQ(latencies_us.size(), static_cast<size_t>(kClients * kRequests));
  std::printf(
      "load test: %d clients x %d requests in %.2f s = %.0f req/s; latency p50 %lld us, "
      "p90 %lld us, p99 %lld us\n",
      kClients, kRequests, absl::ToDoubleSeconds(elapsed),
      kClients * kRequests / absl::ToDoubleSeconds(elapsed),
      static_cast<long long>(Percentile(latencies_us, 0.5)),
      static_cast<long long>(Percentile(latencies_us, 0.9)),
      static_cast<long long>(Percentile(latencies_us, 0.99)));

  // ModelStatistics saw every request and every Loop iteration.
  auto stub = Stub(**server);
  grpc::ClientContext context;
  inference::ModelStatisticsRequest request;
  request.set_name("counter");
  inference::ModelStatisticsResponse response;
  ASSERT_TRUE(stub->ModelStatistics(&context, request, &response).ok());
  ASSERT_EQ(response.model_stats_size(), 1);
  const inference::ModelStatistics& stats = response.model_stats(0);
  EXPECT_EQ(stats.inference_count(), static_cast<uint64_t>(kClients * kRequests));
  EXPECT_EQ(stats.inference_stats().fail().count(), 0u);
  EXPECT_EQ(stats.inference_stats().queue().count(), static_cast<uint64_t>(kClients * kRequests));
  ASSERT_EQ(stats.loop_stats_size(), 1);
  EXPECT_EQ(stats.loop_stats(0).name(), "counter_loop");
  EXPECT_EQ(stats.loop_stats(0).execution().count(), static_cast<uint64_t>(kClients * kRequests));
  EXPECT_EQ(stats.loop_stats(0).iteration_count(), static_cast<uint64_t>(5 * kClients * kRequests));
  EXPECT_GT(stats.loop_stats(0).ns_per_iteration(), 0u);
}

TEST(OperationsTest, NewVersionUnderTrafficIsServedWithoutFailuresAndBadVersionKeepsOldOne) {
  const std::string root = CounterRepository();
  auto server = StartLoopserve(root, {"--repository_poll_seconds=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto probe = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(probe.ok());
  ASSERT_TRUE((*probe)->WaitForReady(absl::Seconds(60)).ok());

  constexpr int kClients = 8;
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0}, served_by_v2{0};
  absl::Mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      auto c = client::Client::Create((*server)->grpc_address());
      if (!c.ok()) return;
      while (!stop.load()) {
        auto result = (*c)->Infer("counter", CounterInputs(3));
        if (result.ok()) {
          ok.fetch_add(1);
          if (result->model_version == "2") served_by_v2.fetch_add(1);
        } else if (failed.fetch_add(1) == 0) {
          absl::MutexLock lock(&mu);
          first_error = result.status().ToString();
        }
      }
    });
  }
  auto wait_for = [](const std::function<bool()>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!done() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));  // bounded poll of the running traffic
    }
    return done();
  };
  ASSERT_TRUE(wait_for([&] { return ok.load() >= 50; }));
  const absl::Time dropped = absl::Now();
  DropVersion(root, 2);
  EXPECT_TRUE(wait_for([&] { return served_by_v2.load() >= 50; }));
  const absl::Duration pickup = absl::Now() - dropped;

  // A broken version 3: the load fails, version 2 keeps serving, the reason is reported.
  const std::string garbage = "not an onnx model";
  DropVersion(root, 3, &garbage);
  auto stub = Stub(**server);
  inference::RepositoryIndexResponse index;
  EXPECT_TRUE(wait_for([&] {
    grpc::ClientContext context;
    index.Clear();
    if (!stub->RepositoryIndex(&context, {}, &index).ok()) return false;
    for (const auto& model : index.models()) {
      if (model.version() == "3" && !model.reason().empty()) return true;
    }
    return false;
  })) << index.DebugString();
  const int before = served_by_v2.load();
  EXPECT_TRUE(wait_for([&] { return served_by_v2.load() >= before + 50; }));
  stop.store(true);
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(failed.load(), 0) << first_error;
  std::printf(
      "reload under traffic: %d requests ok, %d failed, %d served by v2; v2 served %.2f s "
      "after it was dropped\n",
      ok.load(), failed.load(), served_by_v2.load(), absl::ToDoubleSeconds(pickup));
  bool v3_unavailable = false, v2_ready = false;
  for (const auto& model : index.models()) {
    if (model.version() == "3") {
      v3_unavailable = model.state() == "UNAVAILABLE";
      EXPECT_THAT(model.reason(), HasSubstr("model 'counter' v3"));
    }
    if (model.version() == "2") v2_ready = model.state() == "READY";
  }
  EXPECT_TRUE(v3_unavailable);
  EXPECT_TRUE(v2_ready);
  EXPECT_TRUE(*(*probe)->ModelReady("counter"));
  EXPECT_FALSE(*(*probe)->ModelReady("counter", "3"));
  EXPECT_THAT((*server)->log(), HasSubstr("failed to load model 'counter' v3"));
  EXPECT_THAT((*server)->log(), HasSubstr("unloaded model 'counter' v1"));
}

TEST(OperationsTest, ExplicitModelControl) {
  auto server = StartLoopserve(TestModelRepository(),
                               {"--model_control_mode=explicit", "--load_model=counter"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitForReady(absl::Seconds(60)).ok());
  EXPECT_TRUE(*(*client)->ModelReady("counter"));
  EXPECT_FALSE((*client)->ModelReady("rnn").value_or(true));

  auto stub = Stub(**server);
  {
    grpc::ClientContext context;
    inference::RepositoryModelLoadRequest request;
    request.set_model_name("rnn");
    inference::RepositoryModelLoadResponse response;
    ASSERT_TRUE(stub->RepositoryModelLoad(&context, request, &response).ok());
  }
  EXPECT_TRUE(*(*client)->ModelReady("rnn"));
  {
    grpc::ClientContext context;
    inference::RepositoryModelUnloadRequest request;
    request.set_model_name("counter");
    inference::RepositoryModelUnloadResponse response;
    ASSERT_TRUE(stub->RepositoryModelUnload(&context, request, &response).ok());
  }
  EXPECT_FALSE(*(*client)->ModelReady("counter"));
  EXPECT_EQ((*client)->Infer("counter", CounterInputs(2)).status().code(),
            absl::StatusCode::kUnavailable);
  grpc::ClientContext context;
  inference::RepositoryIndexRequest ready_only;
  ready_only.set_ready(true);
  inference::RepositoryIndexResponse index;
  ASSERT_TRUE(stub->RepositoryIndex(&context, ready_only, &index).ok());
  ASSERT_EQ(index.models_size(), 1);
  EXPECT_EQ(index.models(0).name(), "rnn");
  EXPECT_THAT((*server)->log(), HasSubstr("unloaded model 'counter' v1 (unloaded by request)"));
}

TEST(OperationsTest, TimeoutParameterAndOutputBytesCapStopRunningLoops) {
  auto server = StartLoopserve(TestModelRepository(), {"--max_output_bytes=1048576"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitForReady(absl::Seconds(60)).ok());

  // Triton's per-request `timeout` (microseconds) ends an endless loop without any gRPC deadline.
  inference::ModelInferRequest endless;
  endless.set_model_name("endless");
  auto* x = endless.add_inputs();
  x->set_name("x");
  x->set_datatype("INT64");
  x->add_shape(1);
  x->mutable_contents()->add_int64_contents(0);
  (*endless.mutable_parameters())["timeout"].set_int64_param(200'000);
  const absl::Time start = absl::Now();
  auto timed_out = (*client)->InferRaw(endless);
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded) << timed_out.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));

  // A scan output growing without end stops at the cap, naming the Loop output.
  auto capped = (*client)->Infer("counter", CounterInputs(int64_t{1} << 40));
  EXPECT_EQ(capped.status().code(), absl::StatusCode::kResourceExhausted) << capped.status();
  EXPECT_THAT(std::string(capped.status().message()), HasSubstr("'counts'"));
  EXPECT_THAT(std::string(capped.status().message()), HasSubstr("max_output_bytes"));
  auto fits = (*client)->Infer("counter", CounterInputs(1000));
  EXPECT_TRUE(fits.ok()) << fits.status();

  auto metrics = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(
      SumMetric(metrics->body, "loopserve_loop_limit_hits_total", {"reason=\"output_bytes\""}), 1);
  EXPECT_EQ(SumMetric(metrics->body, "loopserve_loop_limit_hits_total", {"reason=\"deadline\""}),
            1);
  bool found = false;
  EXPECT_GT(SumMetric(metrics->body, "process_resident_memory_bytes", {}, &found), 0);
  EXPECT_TRUE(found);
  EXPECT_GT(
      SumMetric(metrics->body, "loopserve_model_load_duration_seconds", {"model=\"counter\""}), 0);
}

TEST(OperationsTest, SigtermDuringALongLoopLetsItFinishAndExitsZero) {
  auto server = StartLoopserve(TestModelRepository(), {"--workers=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitForReady(absl::Seconds(60)).ok());

  // Size the loop to take about 2.5 s on this machine.
  constexpr int64_t kProbe = 200'000;
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE((*client)->Infer("counter", CounterInputs(kProbe)).ok());
  const double per_iteration = absl::ToDoubleSeconds(absl::Now() - t0) / kProbe;
  const int64_t m =
      std::clamp<int64_t>(static_cast<int64_t>(2.5 / per_iteration), kProbe, int64_t{20'000'000});

  absl::StatusOr<client::InferResult> result;
  absl::Notification done;
  std::thread caller([&] {
    result = (*client)->Infer("counter", CounterInputs(m));
    done.Notify();
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    auto metrics = HttpGet((*server)->metrics_port(), "/metrics");
    if (metrics.ok() && SumMetric(metrics->body, "loopserve_inflight_requests", {}) >= 1) break;
    absl::SleepFor(absl::Milliseconds(10));  // bounded polling of a gauge
  }
  ASSERT_TRUE((*server)->Signal(SIGTERM).ok());
  // While draining the server keeps answering: health NOT_SERVING, new requests UNAVAILABLE.
  auto other = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(other.ok());
  bool not_serving = false;
  while (!not_serving && !done.HasBeenNotified() && absl::Now() < deadline) {
    auto health = (*other)->HealthCheck();
    not_serving = health.ok() && *health == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  }
  if (not_serving) {
    auto late = (*other)->Infer("counter", CounterInputs(1));
    EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable) << late.status();
  }
  auto exit_code = (*server)->WaitForExit(absl::Seconds(40));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\nlog:\n" << (*server)->log();
  EXPECT_EQ(*exit_code, 0) << (*server)->log();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  caller.join();
  ASSERT_TRUE(result.ok()) << result.status() << "\nlog:\n" << (*server)->log();
  EXPECT_EQ(FirstInt64(result->Find("final")), m);
  std::printf("SIGTERM during a %lld-iteration loop: it finished, exit code %d (NOT_SERVING %s)\n",
              static_cast<long long>(m), *exit_code, not_serving ? "seen" : "not seen");
  const std::string log = (*server)->log();
  EXPECT_THAT(log, HasSubstr("received SIGTERM"));
  EXPECT_THAT(log, HasSubstr("shutdown complete"));
}

// Endless Loops without a deadline, one on the gRPC thread (inline), one on a worker and one
// queued: SIGTERM cancels them after --exit_timeout_seconds and the process exits 0 within one
// more second.
TEST(OperationsTest, SigtermWithEndlessLoopsExitsWithinTheExitTimeoutPlusOneSecond) {
  auto server = StartLoopserve(TestModelRepository(), {"--workers=2", "--exit_timeout_seconds=2",
                                                       "--inline_run_limit_us=1000000"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitForReady(absl::Seconds(60)).ok());
  const std::vector<client::Tensor> inputs = {client::MakeTensor<int64_t>("x", {1}, {0})};
  // A 20 ms run times the version under the inline limit, so the next request runs inline.
  client::InferOptions short_run;
  short_run.timeout = absl::Milliseconds(20);
  EXPECT_EQ((*client)->Infer("endless", inputs, {}, short_run).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  std::vector<std::thread> callers;
  std::atomic<int> answered{0};
  for (int i = 0; i < 3; ++i) {
    callers.emplace_back([&] {
      auto result = (*client)->Infer("endless", inputs);
      EXPECT_FALSE(result.ok());
      answered.fetch_add(1);
    });
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  double inflight = 0;
  while (absl::Now() < give_up) {
    auto metrics = HttpGet((*server)->metrics_port(), "/metrics");
    inflight = metrics.ok() ? SumMetric(metrics->body, "loopserve_inflight_requests", {}) : 0;
    if (inflight >= 3) break;
    absl::SleepFor(absl::Milliseconds(10));  // bounded polling of a gauge
  }
  ASSERT_GE(inflight, 3);
  const absl::StatusOr<SignalledExit> stopped = SigtermAndWait(**server);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->code, 0) << (*server)->log();
  EXPECT_LT(stopped->took, absl::Seconds(3)) << (*server)->log();
  std::printf(
      "SIGTERM with 3 endless Loops (inline, worker, queued), exit timeout 2 s: exit %d "
      "after %.2f s\n",
      stopped->code, absl::ToDoubleSeconds(stopped->took));
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(answered.load(), 3);
  EXPECT_THAT((*server)->log(), HasSubstr("shutdown complete"));
}

// Issue 26 part 7: the watchdog ends the process at --exit_timeout_seconds + 1 s whatever holds
// the orderly stop, on a wake-up of its own (it used to wait on the pipe the main thread reads,
// and missed the signal when the main thread took it first). What holds the stop here: a poll's
// load of a model whose warm-up data file is a FIFO nobody writes (its open blocks; the loader
// pool is joined as the server is destroyed). Should opening it fail instead, the stop is quick:
// the bound holds either way.
TEST(OperationsTest, SigtermExitsWithinTheExitTimeoutWhileALoadIsStuck) {
  const std::string repository = MakeScratchDir("stuck_load");
  std::filesystem::create_directories(repository + "/a/1");
  std::filesystem::copy_file(TestModelRepository() + "/counter/1/model.onnx",
                             repository + "/a/1/model.onnx");
  auto server = StartLoopserve(
      repository, {"--exit_timeout_seconds=1", "--repository_poll_seconds=1", "--metrics_port=-1"});
  ASSERT_TRUE(server.ok()) << server.status();
  std::filesystem::create_directories(repository + "/stuck/warmup");
  ASSERT_EQ(mkfifo((repository + "/stuck/warmup/m.fifo").c_str(), 0600), 0);
  std::ofstream(repository + "/stuck/config.pbtxt") << R"pb(
    model_warmup
    [ {
      name: "fifo"
      inputs {
        key: "M"
        value: { data_type: TYPE_INT64 input_data_file: "m.fifo" }
      }
      inputs {
        key: "start"
        value: {
          data_type: TYPE_INT64
          dims: [ 1 ]
          zero_data: true
        }
      }
    }]
  )pb";
  std::filesystem::create_directories(repository + "/stuck/1");
  std::filesystem::copy_file(TestModelRepository() + "/counter/1/model.onnx",
                             repository + "/stuck/1/model.onnx");
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while ((*server)->log().find("'stuck' v1: warming up") == std::string::npos &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));  // bounded wait for the next poll
  }
  ASSERT_THAT((*server)->log(), HasSubstr("'stuck' v1: warming up"));
  absl::SleepFor(absl::Milliseconds(200));  // into the open of the FIFO
  const absl::StatusOr<SignalledExit> stopped = SigtermAndWait(**server);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->code, 0) << (*server)->log();
  EXPECT_LT(stopped->took, absl::Seconds(3)) << (*server)->log();
  std::printf(
      "SIGTERM while a load is stuck, exit timeout 1 s: exit %d after %.2f s%s\n", stopped->code,
      absl::ToDoubleSeconds(stopped->took),
      (*server)->log().find("exiting now") != std::string::npos ? " (by the watchdog)" : "");
}

// ---- TLS ----

bool Openssl(const std::vector<std::string>& args, std::string* error) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto result = RunCommand(argv);
  if (!result.ok() || result->exit_code != 0) {
    *error = result.ok() ? result->err : result.status().ToString();
    return false;
  }
  return true;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, all signed by the
// CA, generated fresh in `dir` (EC P-256 keys: fast). Never committed.
bool MakeCertificates(const std::string& dir, std::string* error) {
  const std::vector<std::string> ec = {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                       "-nodes"};
  auto req = [&](const std::vector<std::string>& rest) {
    std::vector<std::string> args = {"req"};
    args.insert(args.end(), ec.begin(), ec.end());
    args.insert(args.end(), rest.begin(), rest.end());
    return Openssl(args, error);
  };
  std::ofstream(dir + "/server.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                     << "extendedKeyUsage=serverAuth\n";
  std::ofstream(dir + "/client.ext") << "extendedKeyUsage=clientAuth\n";
  return req({"-x509", "-days", "1", "-subj", "/CN=loopserve test CA", "-keyout", dir + "/ca.key",
              "-out", dir + "/ca.pem"}) &&
         req({"-subj", "/CN=localhost", "-keyout", dir + "/server.key", "-out",
              dir + "/server.csr"}) &&
         Openssl({"x509", "-req", "-days", "1", "-in", dir + "/server.csr", "-CA", dir + "/ca.pem",
                  "-CAkey", dir + "/ca.key", "-CAcreateserial", "-extfile", dir + "/server.ext",
                  "-out", dir + "/server.pem"},
                 error) &&
         req({"-subj", "/CN=loopserve test client", "-keyout", dir + "/client.key", "-out",
              dir + "/client.csr"}) &&
         Openssl({"x509", "-req", "-days", "1", "-in", dir + "/client.csr", "-CA", dir + "/ca.pem",
                  "-CAkey", dir + "/ca.key", "-CAcreateserial", "-extfile", dir + "/client.ext",
                  "-out", dir + "/client.pem"},
                 error);
}

grpc::Status TlsServerLive(const ServerProcess& server, const std::string& dir, bool client_cert) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadText(dir + "/ca.pem");
  if (client_cert) {
    ssl.pem_private_key = ReadText(dir + "/client.key");
    ssl.pem_cert_chain = ReadText(dir + "/client.pem");
  }
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateCustomChannel(server.grpc_address(), grpc::SslCredentials(ssl), args));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  inference::ServerLiveResponse response;
  grpc::Status status = stub->ServerLive(&context, {}, &response);
  if (status.ok() && !response.live()) return grpc::Status(grpc::StatusCode::INTERNAL, "not live");
  return status;
}

grpc::Status PlaintextServerLive(const ServerProcess& server) {
  auto stub = Stub(server);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  inference::ServerLiveResponse response;
  return stub->ServerLive(&context, {}, &response);
}

TEST(OperationsTest, TlsAndMutualTls) {
  if (!fs::exists("/usr/bin/openssl")) GTEST_SKIP() << "openssl is not installed";
  const std::string dir = MakeScratchDir("tls");
  std::string error;
  ASSERT_TRUE(MakeCertificates(dir, &error)) << error;

  {
    auto server = StartLoopserve(TestModelRepository(), {"--tls_cert=" + dir + "/server.pem",
                                                         "--tls_key=" + dir + "/server.key"});
    ASSERT_TRUE(server.ok()) << server.status();
    grpc::Status tls = TlsServerLive(**server, dir, /*client_cert=*/false);
    EXPECT_TRUE(tls.ok()) << tls.error_message() << "\nlog:\n" << (*server)->log();
    EXPECT_FALSE(PlaintextServerLive(**server).ok());
    EXPECT_THAT((*server)->log(), HasSubstr("(TLS)"));
  }
  {
    auto server = StartLoopserve(TestModelRepository(), {"--tls_cert=" + dir + "/server.pem",
                                                         "--tls_key=" + dir + "/server.key",
                                                         "--tls_client_ca=" + dir + "/ca.pem"});
    ASSERT_TRUE(server.ok()) << server.status();
    grpc::Status with_cert = TlsServerLive(**server, dir, /*client_cert=*/true);
    EXPECT_TRUE(with_cert.ok()) << with_cert.error_message() << "\nlog:\n" << (*server)->log();
    EXPECT_FALSE(TlsServerLive(**server, dir, /*client_cert=*/false).ok());
    EXPECT_FALSE(PlaintextServerLive(**server).ok());
    EXPECT_THAT((*server)->log(), HasSubstr("(mutual TLS)"));
  }
  // A key that is not PEM is a startup error, exit 1.
  std::ofstream(dir + "/bad.key") << "not a key";
  auto bad = StartLoopserve(TestModelRepository(),
                            {"--tls_cert=" + dir + "/server.pem", "--tls_key=" + dir + "/bad.key"});
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace loopserve::testing
