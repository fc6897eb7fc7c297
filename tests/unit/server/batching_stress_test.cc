// Issue 26 part 7: every admitted request is answered exactly once, whatever the dynamic batcher,
// the scheduler, cancellation and deadlines do. Many gRPC clients against a batching version on
// 16 workers, with runs on the gRPC threads allowed (the path that lost requests: a handler running
// a batch that held a call its own thread had queued before), client cancels (short gRPC
// deadlines) and server deadlines (the `timeout` parameter) mixed in. A lost request shows as a
// call without a deadline that never returns (it fails at its 15 s safety deadline) and as a
// Shutdown that never ends (gRPC waits for the call's reactor).

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

// How each request leaves, chosen by its sequence number.
enum class Kind {
  kPlain,           // no deadline but the 15 s safety one: must be answered OK (or a full queue)
  kServerDeadline,  // the `timeout` parameter (1 ms): answered by the server, often expired
  kClientCancel,    // a 2 ms gRPC deadline: gRPC cancels it at the server
};

Kind KindOf(int64_t sequence) {
  switch (sequence % 8) {
    case 3:
      return Kind::kServerDeadline;
    case 6:
      return Kind::kClientCancel;
    default:
      return Kind::kPlain;
  }
}

inference::ModelInferRequest Request(const std::string& id, int rows, Kind kind) {
  inference::ModelInferRequest request;
  request.set_model_name("mm");
  request.set_id(id);
  if (kind == Kind::kServerDeadline) {
    (*request.mutable_parameters())["timeout"].set_int64_param(1000);
  }
  auto* x = request.add_inputs();
  x->set_name("x");
  x->set_datatype("FP32");
  x->add_shape(rows);
  x->add_shape(64);
  for (int i = 0; i < rows * 64; ++i) x->mutable_contents()->add_fp32_contents(0.01f * (i % 50));
  return request;
}

TEST(BatchingStressTest, EveryRequestIsAnsweredOnceUnderManyClientsCancelsAndDeadlines) {
  testing::TempDir repository;
  repository.MakeDir("mm/1");
  std::filesystem::copy_file(std::string(LOOPSERVE_SERVER_TEST_MODELS) + "/matmul.onnx",
                             repository.path() + "/mm/1/model.onnx");
  repository.WriteFile("mm/config.pbtxt",
                       "max_batch_size: 8\n"
                       "instance_group [ { count: 4 kind: KIND_CPU } ]\n"
                       "dynamic_batching { max_queue_delay_microseconds: 500 }");
  ServerOptions options = testing::LocalServerOptions(repository.path());
  options.workers = 16;
  options.max_queue_size = 1024;
  options.model_control_mode = ModelControlMode::kNone;
  options.inline_run_limit = absl::Seconds(1);  // batches and runs on the gRPC threads too
  absl::StatusOr<std::unique_ptr<Server>> started = Server::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<Server> server = *std::move(started);
  ASSERT_TRUE(server->registry().Get("mm", "").ok());

  constexpr int kClients = 48;
  constexpr int kChannels = 4;
  const absl::Duration kRunFor = absl::Seconds(3);
  std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs;
  for (int c = 0; c < kChannels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("loopserve_test_channel", c);  // distinct channels, distinct connections
    stubs.push_back(inference::GRPCInferenceService::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server->grpc_port()),
                                  grpc::InsecureChannelCredentials(), args)));
  }

  std::atomic<int64_t> sent{0}, returned{0};
  absl::Mutex mutex;
  std::map<std::string, int> outcomes;  // "<kind>/<code>" -> count, for the report
  std::vector<std::string> failures;    // at most a few, for the message
  const absl::Time stop_sending = absl::Now() + kRunFor;
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      inference::GRPCInferenceService::Stub& stub = *stubs[t % kChannels];
      for (int64_t n = 0; absl::Now() < stop_sending; ++n) {
        const int64_t sequence = sent.fetch_add(1);
        const Kind kind = KindOf(sequence + t);
        const int rows = 1 + static_cast<int>(sequence % 3);
        const std::string id = absl::StrCat("c", t, "-", n);
        grpc::ClientContext context;
        context.set_deadline(
            absl::ToChronoTime(absl::Now() + (kind == Kind::kClientCancel ? absl::Milliseconds(2)
                                                                          : absl::Seconds(15))));
        inference::ModelInferResponse response;
        const grpc::Status status = stub.ModelInfer(&context, Request(id, rows, kind), &response);
        returned.fetch_add(1);
        std::string problem;
        switch (kind) {
          case Kind::kPlain:
            if (status.ok()) {
              if (response.id() != id || response.outputs_size() != 1 ||
                  response.outputs(0).shape_size() != 2 || response.outputs(0).shape(0) != rows) {
                problem = absl::StrCat("request ", id, " got another request's answer (id '",
                                       response.id(), "')");
              }
            } else if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
              problem = absl::StrCat("request ", id, " without a deadline: code ",
                                     status.error_code(), ": ", status.error_message());
            }
            break;
          case Kind::kServerDeadline:
            if (!status.ok() && status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED &&
                !(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
                  status.error_message().find("deadline") != std::string::npos)) {
              problem = absl::StrCat("request ", id, " with a 1 ms server deadline: code ",
                                     status.error_code(), ": ", status.error_message());
            }
            break;
          case Kind::kClientCancel:
            break;  // whatever came first: the answer or the client's own deadline
        }
        absl::MutexLock lock(&mutex);
        ++outcomes[absl::StrCat(static_cast<int>(kind), "/", status.error_code())];
        if (!problem.empty() && failures.size() < 5) failures.push_back(problem);
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(returned.load(), sent.load());
  for (const std::string& failure : failures) ADD_FAILURE() << failure;
  std::string report;
  for (const auto& [key, count] : outcomes) absl::StrAppend(&report, " ", key, ":", count);
  std::printf("%lld requests from %d clients in %.1f s (kind/code:count)%s\n",
              static_cast<long long>(sent.load()), kClients, absl::ToDoubleSeconds(kRunFor),
              report.c_str());
  EXPECT_GT(outcomes["0/0"], 0) << report;

  // Cancelled calls are still answered by the server: nothing stays in flight.
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  while (server->metrics().inflight_requests().Value() > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));  // bounded polling of a gauge
  }
  EXPECT_EQ(server->metrics().inflight_requests().Value(), 0);

  // A call that the runner answered but gRPC never saw finished would hold Shutdown forever.
  absl::Notification shut_down;
  std::thread stopper([&] {
    server->Shutdown();
    shut_down.Notify();
  });
  if (!shut_down.WaitForNotificationWithTimeout(absl::Seconds(20))) {
    std::fprintf(stderr, "Shutdown did not end in 20 s: a call was never finished\n");
    std::_Exit(1);
  }
  stopper.join();
}

}  // namespace
}  // namespace loopserve::server
