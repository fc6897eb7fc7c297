#pragma once

// A gtest fixture that runs one loopserve process per test suite (started in SetUpTestSuite on
// the generated test model repository) and a client connected to it.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"

namespace loopserve::testing {

// Suites derive from this and call StartServer(flags) from their SetUpTestSuite (a default one
// starting with no extra flags is provided). Not thread-safe itself; the client is.
class LoopserveTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() { StartServer({}); }
  static void TearDownTestSuite() { StopServer(); }

 protected:
  // Starts the server with `extra_flags` and waits until it reports ready; failures are reported
  // by every test of the suite (SetUp), not here.
  static void StartServer(const std::vector<std::string>& extra_flags);
  static void StopServer();

  void SetUp() override;
  // Every test leaves the server alive.
  void TearDown() override;

  static ServerProcess& server() { return *server_; }
  static client::Client& client() { return *client_; }
  // GET /metrics body ("" on failure, with a test failure recorded).
  static std::string Metrics();

 private:
  static std::unique_ptr<ServerProcess> server_;
  static std::unique_ptr<client::Client> client_;
  static absl::Status start_status_;
};

}  // namespace loopserve::testing
