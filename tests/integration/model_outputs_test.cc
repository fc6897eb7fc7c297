// Every example/test model, every numpy-computed case, returns the expected outputs over gRPC,
// with inputs sent as raw and as typed contents.

#include <filesystem>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_fixture.h"
#include "tests/integration/test_util.h"

namespace loopserve::testing {
namespace {

using client::ContentsMode;

struct Case {
  const char* model;
  const char* dir;
};

// Every expected case tests/models/make_test_models.py writes (EveryCaseIsListed keeps this
// list complete).
constexpr Case kCases[] = {
    {"counter", "expected"},
    {"counter", "expected_zero"},
    {"counter", "expected_negative"},
    {"rnn", "expected"},
    {"rnn_batched", "expected"},
    {"rnn_cell", "expected"},
    {"ov_counter", "expected"},
    {"ov_counter", "expected_zero"},
    {"greedy_decoder", "expected"},
    {"greedy_decoder", "expected_no_eos"},
    {"nested", "expected"},
    {"identity_dtypes", "expected"},
    {"identity_dtypes", "expected_empty"},
    {"add_scalar", "expected"},
    {"strings", "expected"},
};

// Cases of sequence_batching models: their inputs include the control and state tensors the
// server feeds, so a client cannot send them; they are the engine's cases (the model against its
// numpy reference, state given explicitly), and python_sequence_test checks the served steps.
constexpr Case kEngineOnlyCases[] = {
    {"simple_sequence", "expected"},
    {"gru_chunk", "expected"},
};

struct Param {
  Case c;
  ContentsMode mode;
};

std::string ParamName(const Param& p) {
  return absl::StrCat(p.c.model, "_", p.c.dir, p.mode == ContentsMode::kRaw ? "_raw" : "_typed");
}

// Readable parameters in test logs and ctest names.
void PrintTo(const Param& p, std::ostream* os) { *os << ParamName(p); }

std::vector<Param> AllParams() {
  std::vector<Param> params;
  for (const Case& c : kCases) {
    for (ContentsMode mode : {ContentsMode::kRaw, ContentsMode::kTyped})
      params.push_back({c, mode});
  }
  return params;
}

class ModelOutputsTest : public LoopserveTest, public ::testing::WithParamInterface<Param> {};

TEST_P(ModelOutputsTest, MatchesNumpyReference) {
  const Case& c = GetParam().c;
  const ContentsMode mode = GetParam().mode;
  auto expected = LoadExpectedCase(c.model, c.dir);
  ASSERT_TRUE(expected.ok()) << expected.status();

  client::InferOptions options;
  options.timeout = absl::Seconds(30);
  options.contents = mode;
  auto result = client().Infer(c.model, expected->inputs, {}, options);
  ASSERT_TRUE(result.ok()) << result.status() << "\nlog:\n" << server().log();
  EXPECT_EQ(result->model_name, c.model);
  EXPECT_EQ(result->model_version, "1");
  ASSERT_EQ(result->outputs.size(), expected->outputs.size());
  for (const client::Tensor& want : expected->outputs) {
    const client::Tensor* got = result->Find(want.name);
    ASSERT_NE(got, nullptr) << "no output '" << want.name << "'";
    EXPECT_EQ(CompareTensors(want, *got), "");
  }
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelOutputsTest, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return ParamName(info.param);
                         });

TEST(ModelOutputsListTest, EveryCaseIsListed) {
  namespace fs = std::filesystem;
  std::set<std::string> listed;
  for (const Case& c : kCases) listed.insert(absl::StrCat(c.model, "/", c.dir));
  for (const Case& c : kEngineOnlyCases) listed.insert(absl::StrCat(c.model, "/", c.dir));
  int on_disk = 0;
  for (const auto& model : fs::directory_iterator(TestModelRepository())) {
    if (!model.is_directory()) continue;
    for (const auto& dir : fs::directory_iterator(model.path())) {
      const std::string name = dir.path().filename().string();
      if (!dir.is_directory() || !absl::StartsWith(name, "expected")) continue;
      ++on_disk;
      EXPECT_EQ(listed.count(absl::StrCat(model.path().filename().string(), "/", name)), 1u)
          << dir.path() << " has no entry in kCases or kEngineOnlyCases";
    }
  }
  EXPECT_EQ(on_disk, static_cast<int>(listed.size()));
}

}  // namespace
}  // namespace loopserve::testing
