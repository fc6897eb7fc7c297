// Model repository lifecycle: polling picks up new, changed and removed models and versions; a
// failed load keeps the previous version serving; explicit Load/Unload; config changes.

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/repository/model_repository.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TempDir;

// Serves the passthrough model unless the file says "broken"; counts load attempts.
class ContentLoader {
 public:
  ModelLoader loader() {
    return
        [this](const std::string& path,
               const engine::LoadOptions&) -> absl::StatusOr<std::shared_ptr<const engine::Model>> {
          loads_.fetch_add(1);
          std::ifstream in(path);
          std::stringstream text;
          text << in.rdbuf();
          if (absl::StartsWith(text.str(), "broken")) {
            return absl::UnimplementedError("op 'Foo' unsupported");
          }
          return testing::PassthroughModel();
        };
  }
  int loads() const { return loads_.load(); }

 private:
  std::atomic<int> loads_{0};
};

class ModelLifecycleTest : public ::testing::Test {
 protected:
  ModelLifecycleTest()
      : registry_({root_.path(), /*max_loop_iterations=*/0, loader_.loader(), &metrics_}) {}

  std::shared_ptr<const LoadedModel> Latest(const std::string& name) {
    absl::StatusOr<std::shared_ptr<const LoadedModel>> model = registry_.Get(name, "");
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *model : nullptr;
  }

  const ModelRegistry::ModelState* FindState(const std::vector<ModelRegistry::ModelState>& index,
                                             const std::string& name) {
    for (const auto& state : index) {
      if (state.name == name) return &state;
    }
    return nullptr;
  }

  TempDir root_;
  ContentLoader loader_;
  Metrics metrics_;
  ModelRegistry registry_;
};

TEST_F(ModelLifecycleTest, PollPicksUpNewChangedAndRemovedVersionsAndModels) {
  root_.WriteFile("m/1/model.onnx", "v1");
  ASSERT_TRUE(registry_.LoadAll().ok());
  std::shared_ptr<const LoadedModel> v1 = Latest("m");
  ASSERT_NE(v1, nullptr);
  EXPECT_EQ(v1->version, 1);
  EXPECT_EQ(loader_.loads(), 1);

  // Nothing changed: nothing reloads, the same object keeps serving.
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(loader_.loads(), 1);
  EXPECT_EQ(Latest("m"), v1);

  // A new version replaces v1 (latest 1); the request that pinned v1 still holds it.
  root_.WriteFile("m/2/model.onnx", "v2");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m")->version, 2);
  EXPECT_EQ(registry_.Get("m", "1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(v1->model->inputs().size(), 3u);

  // Changed files reload the version.
  std::shared_ptr<const LoadedModel> v2 = Latest("m");
  root_.WriteFile("m/2/model.onnx", "v2, rewritten");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(loader_.loads(), 3);
  EXPECT_NE(Latest("m"), v2);
  EXPECT_EQ(Latest("m")->version, 2);

  // A new model appears; a removed version falls back to the remaining one; a removed model goes.
  root_.WriteFile("n/5/model.onnx", "n5");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("n")->version, 5);
  std::filesystem::remove_all(std::filesystem::path(root_.path()) / "m" / "2");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m")->version, 1);
  std::filesystem::remove_all(std::filesystem::path(root_.path()) / "n");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(registry_.Get("n", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FindState(registry_.Index(), "n"), nullptr);
  EXPECT_THAT(metrics_.Serialize(),
              HasSubstr("loopserve_model_ready{model=\"n\",version=\"5\"} 0"));
}

TEST_F(ModelLifecycleTest, FailedNewVersionKeepsThePreviousOneServing) {
  root_.WriteFile("m/1/model.onnx", "v1");
  ASSERT_TRUE(registry_.LoadAll().ok());
  std::shared_ptr<const LoadedModel> v1 = Latest("m");

  root_.WriteFile("m/2/model.onnx", "broken v2");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m"), v1);
  absl::StatusOr<std::shared_ptr<const LoadedModel>> v2 = registry_.Get("m", "2");
  EXPECT_EQ(v2.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(v2.status().message()), HasSubstr("op 'Foo' unsupported"));
  const std::vector<ModelRegistry::ModelState> index = registry_.Index();
  const ModelRegistry::ModelState* state = FindState(index, "m");
  ASSERT_NE(state, nullptr);
  ASSERT_EQ(state->versions.size(), 2u);
  EXPECT_TRUE(state->versions[0].ready);
  EXPECT_THAT(state->versions[0].reason, HasSubstr("retained"));
  EXPECT_FALSE(state->versions[1].ready);
  EXPECT_THAT(state->versions[1].reason, HasSubstr("op 'Foo' unsupported"));

  // The same broken files are not retried on every poll.
  const int loads = loader_.loads();
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(loader_.loads(), loads);
  EXPECT_EQ(Latest("m"), v1);

  // Fixed: v2 serves and v1 leaves.
  root_.WriteFile("m/2/model.onnx", "v2 fixed");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m")->version, 2);
  EXPECT_THAT(*registry_.ReadyVersions("m"), ElementsAre(2));
}

TEST_F(ModelLifecycleTest, FailedReloadKeepsTheLoadedFilesServing) {
  root_.WriteFile("m/1/model.onnx", "v1");
  ASSERT_TRUE(registry_.LoadAll().ok());
  std::shared_ptr<const LoadedModel> v1 = Latest("m");
  root_.WriteFile("m/1/model.onnx", "broken rewrite");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m"), v1);
  const std::vector<ModelRegistry::ModelState> index = registry_.Index();
  const ModelRegistry::ModelState* state = FindState(index, "m");
  ASSERT_NE(state, nullptr);
  ASSERT_EQ(state->versions.size(), 1u);
  EXPECT_TRUE(state->versions[0].ready);
  EXPECT_THAT(state->versions[0].reason, HasSubstr("reload failed"));

  // The next poll neither retries the same broken files nor forgets why they are not served.
  const int loads = loader_.loads();
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(loader_.loads(), loads);
  EXPECT_EQ(Latest("m"), v1);
  const std::vector<ModelRegistry::ModelState> again = registry_.Index();
  EXPECT_THAT(FindState(again, "m")->versions[0].reason, HasSubstr("reload failed"));
  // An explicit Load retries them.
  EXPECT_EQ(registry_.Load("m").code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(loader_.loads(), loads + 1);
  root_.WriteFile("m/1/model.onnx", "v1 fixed");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_NE(Latest("m"), v1);
  EXPECT_TRUE(registry_.Index()[0].versions[0].reason.empty());
}

TEST_F(ModelLifecycleTest, BrokenConfigKeepsServingAndConfigChangesApplyWithoutReload) {
  root_.WriteFile("m/1/model.onnx", "v1");
  ASSERT_TRUE(registry_.LoadAll().ok());
  std::shared_ptr<const LoadedModel> v1 = Latest("m");
  EXPECT_EQ(v1->instances, nullptr);

  root_.WriteFile("m/config.pbtxt", "not text format");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m"), v1);
  const std::vector<ModelRegistry::ModelState> index = registry_.Index();
  ASSERT_NE(FindState(index, "m"), nullptr);
  EXPECT_THAT(FindState(index, "m")->reason, HasSubstr("config.pbtxt"));

  root_.WriteFile("m/config.pbtxt",
                  "parameters { key: \"max_loop_iterations\" value: { string_value: \"9\" } }\n"
                  "parameters { key: \"max_output_bytes\" value: { string_value: \"1000\" } }\n"
                  "instance_group [ { count: 2 kind: KIND_CPU } ]");
  const int loads = loader_.loads();
  ASSERT_TRUE(registry_.Poll().ok());
  std::shared_ptr<const LoadedModel> reconfigured = Latest("m");
  EXPECT_EQ(loader_.loads(), loads);  // same files: the engine model is reused
  EXPECT_EQ(reconfigured->model, v1->model);
  EXPECT_EQ(reconfigured->metrics, v1->metrics);  // statistics continue
  EXPECT_EQ(reconfigured->max_loop_iterations, 9);
  EXPECT_EQ(reconfigured->max_output_bytes, 1000);
  ASSERT_NE(reconfigured->instances, nullptr);
  EXPECT_EQ(reconfigured->instances->max_running(), 2);
}

TEST_F(ModelLifecycleTest, ConfigThatContradictsTheModelKeepsThePreviousConfigServing) {
  root_.WriteFile("m/config.pbtxt", "input [ { name: \"y\" data_type: TYPE_INT64 dims: [ 3 ] } ]");
  root_.WriteFile("m/1/model.onnx", "v1");
  ASSERT_TRUE(registry_.LoadAll().ok());
  std::shared_ptr<const LoadedModel> v1 = Latest("m");
  ASSERT_NE(v1, nullptr);
  EXPECT_EQ(v1->config.input(0).name(), "y");

  // The model's y is [3]: dims [4] is a mismatch; the loaded config keeps serving.
  root_.WriteFile("m/config.pbtxt", "input [ { name: \"y\" data_type: TYPE_INT64 dims: [ 4 ] } ]");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m"), v1);
  const std::vector<ModelRegistry::ModelState> index = registry_.Index();
  const ModelRegistry::ModelState* state = FindState(index, "m");
  ASSERT_NE(state, nullptr);
  ASSERT_EQ(state->versions.size(), 1u);
  EXPECT_TRUE(state->versions[0].ready);
  EXPECT_THAT(state->versions[0].reason,
              HasSubstr("input 'y': dims [4] do not match the model's [3]"));
  // Not retried while nothing changes; an explicit Load reports the error.
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m"), v1);
  absl::Status load = registry_.Load("m");
  EXPECT_EQ(load.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(load.message()), HasSubstr("model 'm' v1: config.pbtxt: input 'y'"));

  // A new version under the bad config fails too; v1 is retained.
  root_.WriteFile("m/2/model.onnx", "v2");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m"), v1);
  EXPECT_EQ(registry_.Get("m", "2").status().code(), absl::StatusCode::kUnavailable);

  // An unknown platform is a model-level error: the loaded version keeps serving.
  root_.WriteFile("m/config.pbtxt", "platform: \"tensorflow_savedmodel\"");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m"), v1);
  const std::vector<ModelRegistry::ModelState> after = registry_.Index();
  ASSERT_NE(FindState(after, "m"), nullptr);
  EXPECT_THAT(FindState(after, "m")->reason, HasSubstr("platform 'tensorflow_savedmodel'"));

  // Fixed: v2 loads under the new config.
  root_.WriteFile("m/config.pbtxt", "input [ { name: \"y\" data_type: TYPE_INT64 dims: [ 3 ] } ]");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_EQ(Latest("m")->version, 2);
}

TEST_F(ModelLifecycleTest, OvmsConfigFileListsTheModelsAndPollPicksUpItsChanges) {
  TempDir elsewhere;
  elsewhere.WriteFile("models/a/1/model.onnx", "a1");
  elsewhere.WriteFile("models/a/2/model.onnx", "a2");
  elsewhere.WriteFile("b_files/7/anything.onnx", "b7");  // OVMS allows any file name
  const std::string config_path = elsewhere.path() + "/config.json";
  elsewhere.WriteFile("config.json", R"json({"model_config_list": [
      {"config": {"name": "a", "base_path": "models/a", "nireq": 2,
                  "model_version_policy": {"all": {}}, "target_device": "CPU"}}]})json");
  ModelRegistry::Options options{"", 0, loader_.loader(), &metrics_};
  options.config_path = config_path;
  ModelRegistry registry(std::move(options));
  ASSERT_TRUE(registry.LoadAll().ok());
  EXPECT_THAT(*registry.ReadyVersions("a"), ElementsAre(1, 2));
  std::shared_ptr<const LoadedModel> a2 = *registry.Get("a", "");
  ASSERT_NE(a2->instances, nullptr);
  EXPECT_EQ(a2->instances->max_running(), 2);  // nireq
  EXPECT_EQ(a2->config.instance_group(0).count(), 2);

  // A second model appears; nireq changes (a reconfiguration, no reload).
  const int loads = loader_.loads();
  elsewhere.WriteFile("config.json", R"json({"model_config_list": [
      {"config": {"name": "a", "base_path": "models/a", "nireq": 3,
                  "model_version_policy": {"all": {}}}},
      {"config": {"name": "b", "base_path": "b_files"}}]})json");
  ASSERT_TRUE(registry.Poll().ok());
  EXPECT_EQ(loader_.loads(), loads + 1);  // b only
  EXPECT_EQ((*registry.Get("a", ""))->instances->max_running(), 3);
  EXPECT_EQ((*registry.Get("a", ""))->model, a2->model);
  absl::StatusOr<std::shared_ptr<const LoadedModel>> b = registry.Get("b", "");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->version, 7);
  EXPECT_THAT((*b)->path, HasSubstr("anything.onnx"));

  // A broken file changes nothing (Poll reports it); a model dropped from the list is unloaded.
  elsewhere.WriteFile("config.json", "{\"model_config_list\": [");
  EXPECT_EQ(registry.Poll().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry.Get("b", "").ok());
  elsewhere.WriteFile("config.json", R"json({"model_config_list": [
      {"config": {"name": "b", "base_path": "b_files"}}]})json");
  ASSERT_TRUE(registry.Poll().ok());
  EXPECT_EQ(registry.Get("a", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.Get("b", "").ok());
  EXPECT_EQ(registry.Load("a").code(), absl::StatusCode::kNotFound);

  // A base path that does not exist: the model is reported, not ready.
  elsewhere.WriteFile("config.json", R"json({"model_config_list": [
      {"config": {"name": "c", "base_path": "/nonexistent/c"}}]})json");
  ASSERT_TRUE(registry.Poll().ok());
  EXPECT_EQ(registry.Get("c", "").status().code(), absl::StatusCode::kUnavailable);
  const std::vector<ModelRegistry::ModelState> index = registry.Index();
  ASSERT_NE(FindState(index, "c"), nullptr);
  EXPECT_THAT(FindState(index, "c")->reason, HasSubstr("is not a directory"));
}

TEST_F(ModelLifecycleTest, VersionPolicyChangesApply) {
  root_.WriteFile("m/1/model.onnx", "v1");
  root_.WriteFile("m/2/model.onnx", "v2");
  root_.WriteFile("m/3/model.onnx", "v3");
  ASSERT_TRUE(registry_.LoadAll().ok());
  EXPECT_THAT(*registry_.ReadyVersions("m"), ElementsAre(3));
  root_.WriteFile("m/config.pbtxt", "version_policy { latest { num_versions: 2 } }");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_THAT(*registry_.ReadyVersions("m"), ElementsAre(2, 3));
  root_.WriteFile("m/config.pbtxt", "version_policy { specific { versions: [1, 3] } }");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_THAT(*registry_.ReadyVersions("m"), ElementsAre(1, 3));
  root_.WriteFile("m/config.pbtxt", "version_policy { all {} }");
  ASSERT_TRUE(registry_.Poll().ok());
  EXPECT_THAT(*registry_.ReadyVersions("m"), ElementsAre(1, 2, 3));
}

TEST_F(ModelLifecycleTest, ExplicitLoadAndUnload) {
  root_.WriteFile("m/1/model.onnx", "v1");
  root_.WriteFile("bad/1/model.onnx", "broken");
  EXPECT_EQ(registry_.Get("m", "").status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(registry_.Load("m").ok());
  std::shared_ptr<const LoadedModel> pinned = Latest("m");
  ASSERT_TRUE(registry_.Unload("m").ok());
  EXPECT_EQ(registry_.Get("m", "").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(pinned->model->inputs().size(), 3u);  // in flight: still usable
  const std::vector<ModelRegistry::ModelState> index = registry_.Index();
  const ModelRegistry::ModelState* state = FindState(index, "m");
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->reason, "unloaded");
  ASSERT_TRUE(registry_.Load("m").ok());
  EXPECT_EQ(Latest("m")->version, 1);

  absl::Status bad = registry_.Load("bad");
  EXPECT_EQ(bad.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("model 'bad' v1"));
  EXPECT_EQ(registry_.Load("../m").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Load("nope").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_.Unload("nope").code(), absl::StatusCode::kNotFound);

  // An explicit Load retries a version whose files did not change.
  const int loads = loader_.loads();
  EXPECT_FALSE(registry_.Load("bad").ok());
  EXPECT_EQ(loader_.loads(), loads + 1);
}

TEST_F(ModelLifecycleTest, ErrorsDoNotEchoHostileNamesVerbatim) {
  const std::string hostile = "evil\nname" + std::string(500, 'x');
  absl::Status status = registry_.Get(hostile, "").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(status.message()).find('\n'), std::string::npos);
  EXPECT_LT(status.message().size(), 200u);
}

TEST_F(ModelLifecycleTest, StatisticsOnlyWithoutMetrics) {
  root_.WriteFile("m/1/model.onnx", "v1");
  ModelRegistry registry({root_.path(), 0, loader_.loader(), nullptr});
  ASSERT_TRUE(registry.LoadAll().ok());
  auto model = registry.Get("m", "");
  ASSERT_TRUE(model.ok());
  ASSERT_NE((*model)->metrics, nullptr);
  (*model)->metrics->RecordRequest(Protocol::kGrpc, absl::StatusCode::kOk, absl::Milliseconds(2));
  (*model)->metrics->RecordRequest(Protocol::kHttp, absl::StatusCode::kInternal,
                                   absl::Milliseconds(1));
  const ModelVersionStatistics stats = (*model)->metrics->Statistics();
  EXPECT_EQ(stats.success.count, 1u);
  EXPECT_EQ(stats.success.ns, 2000000u);
  EXPECT_EQ(stats.fail.count, 1u);
  EXPECT_GT(stats.last_inference_ms, 0u);
}

}  // namespace
}  // namespace loopserve::server
