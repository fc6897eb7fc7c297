#include "server/repository/model_repository.h"

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TempDir;

TEST(ModelNameTest, NamesCannotEscapeTheRoot) {
  EXPECT_TRUE(IsValidModelName("rnn"));
  EXPECT_TRUE(IsValidModelName("rnn-v2_large.1"));
  for (const char* bad :
       {"", ".", "..", "../etc", "a/b", "/abs", "a\\b", ".hidden", "a b", "a\nb"}) {
    EXPECT_FALSE(IsValidModelName(bad)) << bad;
  }
  EXPECT_FALSE(IsValidModelName(std::string("a\0b", 3)));
  EXPECT_FALSE(IsValidModelName(std::string(256, 'a')));
}

TEST(VersionTest, OnlyPositiveCanonicalIntegers) {
  EXPECT_EQ(ParseVersion("1"), 1);
  EXPECT_EQ(ParseVersion("42"), 42);
  EXPECT_EQ(ParseVersion("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"", "0", "01", "-1", "+1", "v1", "1.0", "1a", " 1", "9223372036854775808",
                          "99999999999999999999"}) {
    EXPECT_FALSE(ParseVersion(bad).has_value()) << bad;
  }
}

TEST(RepositoryScanTest, FindsModelsAndVersionsIgnoringJunk) {
  TempDir root;
  root.WriteFile("a/1/model.onnx");
  root.WriteFile("a/3/model.onnx");
  root.MakeDir("a/0");
  root.MakeDir("a/01");
  root.MakeDir("a/latest");
  root.MakeDir("a/-2");
  root.WriteFile("a/7");  // a file, not a folder
  root.WriteFile("b/2/model.xml");
  root.MakeDir(".git");
  root.MakeDir("bad name");
  root.WriteFile("README.md");

  absl::StatusOr<std::vector<std::string>> names = ScanModelNames(root.path());
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("a", "b"));
  EXPECT_THAT(ScanVersions(root.path() + "/a"), ElementsAre(1, 3));
  EXPECT_THAT(*FindModelFile(root.path() + "/b/2", inference::ModelConfig()),
              HasSubstr("model.xml"));
  EXPECT_EQ(FindModelFile(root.path() + "/a/0", inference::ModelConfig()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RepositoryScanTest, MissingRootIsNotFound) {
  EXPECT_EQ(ScanModelNames("/nonexistent/loopserve/repo").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(VersionPolicyTest, LatestAllSpecific) {
  const std::vector<int64_t> available = {1, 2, 5, 9};
  inference::ModelVersionPolicy policy;
  EXPECT_THAT(SelectVersions(available, policy), ElementsAre(9));  // default: latest 1
  policy.mutable_latest()->set_num_versions(2);
  EXPECT_THAT(SelectVersions(available, policy), ElementsAre(5, 9));
  policy.mutable_latest()->set_num_versions(10);
  EXPECT_THAT(SelectVersions(available, policy), ElementsAre(1, 2, 5, 9));
  policy.mutable_all();
  EXPECT_THAT(SelectVersions(available, policy), ElementsAre(1, 2, 5, 9));
  policy.mutable_specific()->add_versions(2);
  policy.mutable_specific()->add_versions(7);  // absent: ignored
  EXPECT_THAT(SelectVersions(available, policy), ElementsAre(2));
  EXPECT_TRUE(SelectVersions({}, inference::ModelVersionPolicy()).empty());
}

// A loader that serves the passthrough model for any path except those containing "broken".
absl::StatusOr<std::shared_ptr<const engine::Model>> FakeLoader(const std::string& path,
                                                                const engine::LoadOptions&) {
  if (absl::StrContains(path, "broken")) return absl::UnimplementedError("op 'Foo' unsupported");
  return testing::PassthroughModel();
}

TEST(ModelRegistryTest, LoadsGoodModelsAndReportsBadOnes) {
  TempDir root;
  root.WriteFile("good/1/model.onnx");
  root.WriteFile("good/2/model.onnx");
  root.WriteFile("broken/1/model.onnx");
  root.WriteFile("empty/1/README");
  root.WriteFile("badcfg/config.pbtxt", "this is not text format");
  root.WriteFile("badcfg/1/model.onnx");
  root.WriteFile("capped/config.pbtxt",
                 "parameters { key: \"max_loop_iterations\" value: { string_value: \"7\" } }\n"
                 "version_policy { all {} }");
  root.WriteFile("capped/1/model.onnx");
  root.WriteFile("capped/2/model.xml");

  Metrics metrics;
  ModelRegistry registry({root.path(), /*max_loop_iterations=*/100, FakeLoader, &metrics});
  ASSERT_TRUE(registry.LoadAll().ok());

  absl::StatusOr<std::shared_ptr<const LoadedModel>> good = registry.Get("good", "");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)->version, 2);  // latest 1
  EXPECT_EQ((*good)->platform, "onnxruntime_onnx");
  EXPECT_EQ((*good)->max_loop_iterations, 100);
  EXPECT_EQ(registry.Get("good", "1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.Get("good", "2").ok());
  EXPECT_EQ(registry.Get("good", "abc").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Get("nope", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Get("../good", "").status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<std::shared_ptr<const LoadedModel>> broken = registry.Get("broken", "1");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("op 'Foo' unsupported"));
  EXPECT_EQ(registry.Get("empty", "").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(registry.Get("badcfg", "").status().message()),
              HasSubstr("config.pbtxt"));

  EXPECT_THAT(*registry.ReadyVersions("capped"), ElementsAre(1, 2));
  EXPECT_EQ((*registry.Get("capped", "1"))->max_loop_iterations, 7);
  EXPECT_EQ((*registry.Get("capped", "2"))->platform, "openvino");

  const std::vector<ModelRegistry::ModelState> index = registry.Index();
  ASSERT_EQ(index.size(), 5u);
  EXPECT_EQ(index[0].name, "badcfg");
  EXPECT_EQ(index[1].name, "broken");
  ASSERT_EQ(index[1].versions.size(), 1u);
  EXPECT_FALSE(index[1].versions[0].ready);

  const std::string text = metrics.Serialize();
  EXPECT_THAT(text, HasSubstr("loopserve_model_ready{model=\"good\",version=\"2\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_model_ready{model=\"broken\",version=\"1\"} 0"));
}

TEST(ModelRegistryTest, MemoryBudgetFromParametersReachesTheLoaderAndTheRequests) {
  TempDir root;
  root.WriteFile("own/1/model.onnx");
  root.WriteFile("own/config.pbtxt",
                 "parameters { key: \"max_request_memory_bytes\" value: { string_value: "
                 "\"4096\" } }");
  root.WriteFile("default/1/model.onnx");
  std::map<std::string, engine::LoadOptions> seen;
  ModelRegistry::Options options{
      root.path(), 0,
      [&](const std::string& path,
          const engine::LoadOptions& load) -> absl::StatusOr<std::shared_ptr<const engine::Model>> {
        seen[path] = load;
        return testing::PassthroughModel();
      },
      nullptr};
  options.max_request_memory_bytes = 1 << 20;
  options.max_model_file_bytes = 12345;
  ModelRegistry registry(std::move(options));
  ASSERT_TRUE(registry.LoadAll().ok());
  const std::string own = root.path() + "/own/1/model.onnx";
  const std::string fallback = root.path() + "/default/1/model.onnx";
  ASSERT_EQ(seen.count(own), 1u);
  EXPECT_EQ(seen[own].max_memory_bytes, 4096);  // the model's own budget caps its constants too
  EXPECT_EQ(seen[own].max_file_bytes, 12345);
  EXPECT_EQ(seen[fallback].max_memory_bytes, 1 << 20);
  EXPECT_EQ((*registry.Get("own", ""))->max_request_memory_bytes, 4096);
  EXPECT_EQ((*registry.Get("default", ""))->max_request_memory_bytes, 1 << 20);
  EXPECT_EQ((*registry.Get("default", ""))
                ->config.parameters()
                .at("max_request_memory_bytes")
                .string_value(),
            "1048576");
}

// The server's Loop thread mode (--loop_threads) reaches every version's runs (LoadedModel, which
// InferenceRunner and the warm-up turn into RunOptions) unless its config.pbtxt sets its own; the
// complete config shows the mode in effect.
TEST(ModelRegistryTest, LoopThreadsFromTheServerOrTheModelsParameters) {
  TempDir root;
  root.WriteFile("own/1/model.onnx");
  root.WriteFile("own/config.pbtxt",
                 "parameters { key: \"loop_threads\" value: { string_value: \" one \" } }");
  root.WriteFile("default/1/model.onnx");
  ModelRegistry::Options options{root.path(), 0, FakeLoader, nullptr};
  options.loop_threads = engine::LoopThreads::kIntraOp;
  ModelRegistry registry(std::move(options));
  ASSERT_TRUE(registry.LoadAll().ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> own = registry.Get("own", "");
  absl::StatusOr<std::shared_ptr<const LoadedModel>> fallback = registry.Get("default", "");
  ASSERT_TRUE(own.ok()) << own.status();
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ((*own)->loop_threads, engine::LoopThreads::kOneThread);
  EXPECT_EQ((*fallback)->loop_threads, engine::LoopThreads::kIntraOp);
  EXPECT_EQ((*own)->config.parameters().at("loop_threads").string_value(), "one");
  EXPECT_EQ((*fallback)->config.parameters().at("loop_threads").string_value(), "intra_op");
}

TEST(ModelRegistryTest, ReasonsDoNotShowServerPaths) {
  TempDir root;
  root.MakeDir("empty/1");
  root.WriteFile("big/1/model.onnx");
  root.WriteFile("big/config.pbtxt", std::string(kMaxModelConfigBytes + 1, ' '));
  ModelRegistry registry({root.path(), 0, FakeLoader, nullptr});
  ASSERT_TRUE(registry.LoadAll().ok());
  const std::string empty(registry.Get("empty", "1").status().message());
  EXPECT_THAT(empty, HasSubstr("version folder 1 contains no model.onnx or model.xml"));
  EXPECT_EQ(empty.find(root.path()), std::string::npos) << empty;
  const std::string big(registry.Get("big", "").status().message());
  EXPECT_THAT(big, HasSubstr("config.pbtxt has 1048577 bytes, more than the limit"));
  EXPECT_EQ(big.find(root.path()), std::string::npos) << big;
}

TEST(ModelRegistryTest, PinnedModelOutlivesTheRegistry) {
  TempDir root;
  root.WriteFile("good/1/model.onnx");
  std::shared_ptr<const LoadedModel> pinned;
  {
    ModelRegistry registry({root.path(), 0, FakeLoader, nullptr});
    ASSERT_TRUE(registry.LoadAll().ok());
    pinned = *registry.Get("good", "1");
  }
  EXPECT_EQ(pinned->model->inputs().size(), 3u);
}

}  // namespace
}  // namespace loopserve::server
