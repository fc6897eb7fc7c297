#include "tests/integration/server_fixture.h"

#include "absl/strings/str_cat.h"
#include "tests/integration/test_util.h"

namespace loopserve::testing {

std::unique_ptr<ServerProcess> LoopserveTest::server_;
std::unique_ptr<client::Client> LoopserveTest::client_;
absl::Status LoopserveTest::start_status_;

void LoopserveTest::StartServer(const std::vector<std::string>& extra_flags) {
  StopServer();
  ServerProcess::Options options;
  options.binary = LoopserveBinary();
  options.model_repository = TestModelRepository();
  options.extra_flags = extra_flags;
  auto server = ServerProcess::Start(options);
  if (!server.ok()) {
    start_status_ = server.status();
    return;
  }
  server_ = *std::move(server);
  auto client = client::Client::Create(server_->grpc_address());
  if (!client.ok()) {
    start_status_ = client.status();
    return;
  }
  client_ = *std::move(client);
  start_status_ = client_->WaitForReady(absl::Seconds(60));
  if (!start_status_.ok()) {
    start_status_ = absl::Status(start_status_.code(),
                                 absl::StrCat(start_status_.message(), "\nlog:\n", server_->log()));
  }
}

void LoopserveTest::StopServer() {
  client_.reset();
  server_.reset();  // SIGKILLs a server a test did not stop itself
  start_status_ = absl::OkStatus();
}

void LoopserveTest::SetUp() {
  ASSERT_TRUE(start_status_.ok()) << "loopserve did not start: " << start_status_;
  ASSERT_NE(server_, nullptr);
}

void LoopserveTest::TearDown() {
  if (server_ == nullptr || server_->exited()) return;
  auto live = client_->ServerLive();
  EXPECT_TRUE(live.ok() && *live) << "server not live after the test: " << live.status()
                                  << "\nlog:\n"
                                  << server_->log();
}

std::string LoopserveTest::Metrics() {
  auto response = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_TRUE(response.ok()) << response.status();
  if (!response.ok()) return "";
  EXPECT_EQ(response->status, 200);
  return response->body;
}

}  // namespace loopserve::testing
