#include "engine/tools/conformance.h"

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/tools/onnx_tensor_io.h"
#include "gtest/gtest.h"

namespace loopserve::tools {
namespace {

namespace fs = std::filesystem;

// Collects what RunIsolated reports, checking that it comes in index order.
struct Collected {
  std::vector<CaseResult> results;
  CaseReporter Reporter() {
    return [this](size_t index, const CaseResult& result) {
      EXPECT_EQ(index, results.size());
      results.push_back(result);
    };
  }
};

CaseResult Behave(const std::string& what) {
  if (what == "pass") return CaseResult{true, ""};
  if (what == "fail") return CaseResult{false, "wrong"};
  if (what == "segv") {
    // The default action, whatever handler is installed (AddressSanitizer's would report the
    // signal and abort instead).
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
  }
  if (what == "abort") std::abort();
  if (what == "hang") {
    while (true) pause();
  }
  if (what == "exit") _exit(3);
  if (what == "slow_pass") {
    usleep(300000);
    return CaseResult{true, ""};
  }
  return CaseResult{false, "unknown behaviour " + what};
}

TEST(RunIsolatedTest, CrashesHangsAndExitsFailOnlyTheirCase) {
  for (int jobs : {1, 2, 3}) {
    Collected collected;
    const std::vector<std::string> cases = {"slow_pass", "segv", "pass", "hang",
                                            "abort",     "fail", "exit", "pass"};
    ASSERT_TRUE(RunIsolated(cases, jobs, absl::Seconds(1), Behave, collected.Reporter()).ok());
    const std::vector<CaseResult>& r = collected.results;
    ASSERT_EQ(r.size(), cases.size());
    EXPECT_TRUE(r[0].passed);
    EXPECT_EQ(r[1].reason, "crashed (signal 11)");
    EXPECT_TRUE(r[2].passed);
    EXPECT_EQ(r[3].reason, "timed out (1s)");
    EXPECT_EQ(r[4].reason, "crashed (signal 6)");
    EXPECT_EQ(r[5].reason, "wrong");
    EXPECT_EQ(r[6].reason, "exited with status 3 without a verdict");
    EXPECT_TRUE(r[7].passed);
  }
}

class CaseDirTest : public testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("conformance_test_" + std::to_string(getpid()));
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A case whose model.onnx is not a model at all: it can never load.
  std::string UnloadableCase(const std::string& name, const std::string& marker) {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    std::ofstream(dir / "model.onnx") << "not a model";
    if (!marker.empty()) std::ofstream(dir / marker) << "reason\n";
    return dir.string();
  }

  fs::path root_;
};

TEST_F(CaseDirTest, ExpectErrorPassesWhenLoadFails) {
  EXPECT_TRUE(RunCase(UnloadableCase("a", "EXPECT_ERROR")).passed);
  const CaseResult no_data = RunCase(UnloadableCase("b", "NO_DATA"));
  EXPECT_FALSE(no_data.passed);
  EXPECT_EQ(no_data.reason.rfind("load: ", 0), 0u) << no_data.reason;
  EXPECT_FALSE(RunCase(UnloadableCase("c", "")).passed);
  EXPECT_EQ(RunCase((root_ / "missing").string()).reason, "no model.onnx or model.xml");
}

// ONNX's test_abs (Abs of a [3, 4, 5] float tensor) with its reference moved by 2e-7 + 2e-3 |y|:
// beyond the default tolerance (atol 1e-7, rtol 1e-3), within an ATOL file's 0.01; an ATOL that is
// not a tolerance fails the case and names the file.
TEST_F(CaseDirTest, AtolFileSetsTheAbsoluteTolerance) {
  const fs::path source = "/usr/share/libonnx-testdata/data/node/test_abs";
  if (!fs::exists(source)) GTEST_SKIP() << source << " not installed";
  const fs::path dir = root_ / "abs";
  fs::create_directories(dir / "test_data_set_0");
  fs::copy_file(source / "model.onnx", dir / "model.onnx");
  fs::copy_file(source / "test_data_set_0" / "input_0.pb", dir / "test_data_set_0" / "input_0.pb");
  const engine::ValueType tensor;
  std::string name;
  auto expected =
      ReadValueFile((source / "test_data_set_0" / "output_0.pb").string(), tensor, &name);
  ASSERT_TRUE(expected.ok()) << expected.status();
  engine::Tensor& moved = expected->mutable_tensor();
  float* y = moved.mutable_data<float>();
  for (int64_t i = 0; i < moved.NumElements(); ++i) y[i] += 2e-7f + 2e-3f * std::fabs(y[i]);
  ASSERT_TRUE(
      WriteValueFile((dir / "test_data_set_0" / "output_0.pb").string(), name, *expected, tensor)
          .ok());
  const CaseResult strict = RunCase(dir.string());
  EXPECT_FALSE(strict.passed);
  EXPECT_NE(strict.reason.find("elements differ"), std::string::npos) << strict.reason;
  std::ofstream(dir / "ATOL") << "0.01\n";
  EXPECT_TRUE(RunCase(dir.string()).passed);
  std::ofstream(dir / "ATOL") << "loose\n";
  const CaseResult bad = RunCase(dir.string());
  EXPECT_FALSE(bad.passed);
  EXPECT_EQ(bad.reason.rfind("ATOL: 'loose'", 0), 0u) << bad.reason;
}

TEST_F(CaseDirTest, MainPrintsVerdictsSummaryAndList) {
  UnloadableCase("suite/x_expect_error", "EXPECT_ERROR");
  UnloadableCase("suite/y_broken", "");
  ConformanceOptions options;
  options.dir = (root_ / "suite").string();
  options.list_file = (root_ / "list.txt").string();
  testing::internal::CaptureStdout();
  const int exit_status = RunConformanceMain(options);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(exit_status, 1);
  EXPECT_NE(out.find("PASS x_expect_error\n"), std::string::npos) << out;
  EXPECT_NE(out.find("FAIL y_broken: load: "), std::string::npos) << out;
  EXPECT_NE(out.find("\n1 passed, 1 failed\n"), std::string::npos) << out;

  std::ifstream list(options.list_file);
  std::string line;
  ASSERT_TRUE(std::getline(list, line));
  EXPECT_EQ(line, "x_expect_error\tpass\t");
  ASSERT_TRUE(std::getline(list, line));
  EXPECT_EQ(line.rfind("y_broken\tfail\tload: ", 0), 0u) << line;

  options.filter = "^x_";
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunConformanceMain(options), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("1 passed, 0 failed"), std::string::npos);

  options.dir = (root_ / "nope").string();
  EXPECT_EQ(RunConformanceMain(options), 2);
}

}  // namespace
}  // namespace loopserve::tools
