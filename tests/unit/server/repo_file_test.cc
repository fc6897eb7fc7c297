// Opening repository files (server/repository/repo_file.h) and the config readers built on it:
// symlinks that leave the model folder, non-regular files, size caps, nesting depth and bounded
// messages. The expected behaviour is the contract of issue 26 (parts 3 and 5): a clear
// InvalidArgument that shows neither a server path nor a byte of the file, and never a hang.

#include "server/repository/repo_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/repository/model_config.h"
#include "server/repository/model_repository.h"
#include "server/repository/ovms_config.h"
#include "server/status_util.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::TempDir;

constexpr char kSecret[] = "TOPSECRET";

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// A model folder `m` under a fresh root, and a secret file outside it (in its own folder).
struct Layout {
  TempDir root;
  TempDir outside;
  std::string folder() const { return root.path() + "/m"; }
  std::string secret() const { return outside.path() + "/secret"; }
  Layout() {
    root.MakeDir("m");
    outside.WriteFile("secret", absl::StrCat(kSecret, ": 1\n"));
  }
};

void MakeFifo(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0) << path;
}

TEST(RepositoryFileTest, ReadsARegularFileInside) {
  Layout l;
  l.root.WriteFile("m/config.pbtxt", "max_batch_size: 4");
  absl::StatusOr<std::string> text =
      ReadRepositoryFile(l.folder(), l.folder() + "/config.pbtxt", 100, "config.pbtxt");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "max_batch_size: 4");
}

TEST(RepositoryFileTest, FollowsSymlinksThatStayInside) {
  Layout l;
  l.root.WriteFile("m/shared/base.pbtxt", "max_batch_size: 2");
  fs::create_symlink("shared/base.pbtxt", l.folder() + "/config.pbtxt");
  absl::StatusOr<std::string> text =
      ReadRepositoryFile(l.folder(), l.folder() + "/config.pbtxt", 100, "config.pbtxt");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "max_batch_size: 2");
}

TEST(RepositoryFileTest, RefusesSymlinksThatLeaveWithoutShowingTheFile) {
  Layout l;
  fs::create_symlink(l.secret(), l.folder() + "/config.pbtxt");
  // Also through a symlinked folder, and one hop inside then out.
  fs::create_directory_symlink(l.outside.path(), l.folder() + "/warmup");
  fs::create_symlink("config.pbtxt", l.folder() + "/hop");
  for (const char* name : {"config.pbtxt", "warmup/secret", "hop"}) {
    absl::StatusOr<std::string> text =
        ReadRepositoryFile(l.folder(), l.folder() + "/" + name, 100, "the file");
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(
        Message(text.status()),
        AllOf(HasSubstr("the file resolves outside its model folder"), Not(HasSubstr(kSecret)),
              Not(HasSubstr(l.outside.path())), Not(HasSubstr(l.root.path()))))
        << name;
  }
}

TEST(RepositoryFileTest, RefusesDirectoriesAndFifosWithoutBlocking) {
  Layout l;
  l.root.MakeDir("m/dir");
  MakeFifo(l.folder() + "/fifo");
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> dir = ReadRepositoryFile(l.folder(), l.folder() + "/dir", 100, "d");
  absl::StatusOr<std::string> fifo = ReadRepositoryFile(l.folder(), l.folder() + "/fifo", 100, "f");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(dir.status()), HasSubstr("d is a directory, not a regular file"));
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(fifo.status()), HasSubstr("f is a FIFO, not a regular file"));
  // A FIFO reached through a symlink inside is refused alike.
  fs::create_symlink("fifo", l.folder() + "/link");
  EXPECT_THAT(Message(ReadRepositoryFile(l.folder(), l.folder() + "/link", 100, "f").status()),
              HasSubstr("is a FIFO"));
  // Reading a FIFO without a writer would block forever; refusing it takes microseconds.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(RepositoryFileTest, CapsTheSizeAndTellsMissingFromBroken) {
  Layout l;
  l.root.WriteFile("m/big", std::string(101, 'x'));
  EXPECT_THAT(Message(ReadRepositoryFile(l.folder(), l.folder() + "/big", 100, "big").status()),
              HasSubstr("big has 101 bytes, more than the limit of 100"));
  EXPECT_EQ(ReadRepositoryFile(l.folder(), l.folder() + "/big", 101, "big")->size(), 101u);
  EXPECT_EQ(ReadRepositoryFile(l.folder(), l.folder() + "/none", 100, "n").status().code(),
            absl::StatusCode::kNotFound);
  fs::create_symlink("nowhere", l.folder() + "/dangling");
  absl::Status dangling =
      ReadRepositoryFile(l.folder(), l.folder() + "/dangling", 100, "x").status();
  EXPECT_EQ(dangling.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(dangling), HasSubstr("x cannot be resolved"));
}

TEST(RepositoryFileTest, ModelFoldersMayNotLeaveTheRepository) {
  Layout l;
  fs::create_directory_symlink(l.outside.path(), l.root.path() + "/escaped");
  fs::create_directory_symlink("m", l.root.path() + "/alias");
  EXPECT_TRUE(CheckRepositoryFolder(l.root.path(), l.root.path() + "/alias", "a").ok());
  EXPECT_THAT(Message(CheckRepositoryFolder(l.root.path(), l.root.path() + "/escaped", "e")),
              HasSubstr("e resolves outside the model repository"));
}

// ---- config.pbtxt through ReadModelConfig and the registry ----

TEST(ReadModelConfigTest, ASymlinkedSecretIsNeitherParsedNorShown) {
  Layout l;
  fs::create_symlink(l.secret(), l.folder() + "/config.pbtxt");
  absl::StatusOr<ParsedModelConfig> parsed = ReadModelConfig(l.folder(), "m");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(parsed.status()),
              AllOf(HasSubstr("model 'm': config.pbtxt resolves outside its model folder"),
                    Not(HasSubstr(kSecret))));
}

TEST(ReadModelConfigTest, DirectoryAndFifoConfigsAreErrorsNotDefaults) {
  Layout l;
  l.root.MakeDir("m/config.pbtxt");
  EXPECT_THAT(Message(ReadModelConfig(l.folder(), "m").status()),
              HasSubstr("model 'm': config.pbtxt is a directory, not a regular file"));
  fs::remove(l.folder() + "/config.pbtxt");
  MakeFifo(l.folder() + "/config.pbtxt");
  EXPECT_THAT(Message(ReadModelConfig(l.folder(), "m").status()),
              HasSubstr("model 'm': config.pbtxt is a FIFO, not a regular file"));
  fs::remove(l.folder() + "/config.pbtxt");
  absl::StatusOr<ParsedModelConfig> none = ReadModelConfig(l.folder(), "m");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->from_file);
}

TEST(ReadModelConfigTest, SyntaxErrorsDoNotRepeatTheText) {
  // What the text parser stumbles on is not shown: the file may be something else entirely.
  for (const std::string& text :
       {std::string(kSecret), absl::StrCat("max_batch_size: ", kSecret),
        absl::StrCat("platform: ", kSecret),
        absl::StrCat("input [ { name: \"x\" ", kSecret, " } ]"),
        absl::StrCat("max_batch_size: 99999999999999999999", kSecret),
        absl::StrCat("instance_group [ { kind: ", kSecret, " } ]"), absl::StrCat("\"", kSecret)}) {
    absl::Status status = ParseModelConfig(text, "m").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(Message(status), AllOf(HasSubstr("config.pbtxt: 1:"), Not(HasSubstr(kSecret))))
        << text;
  }
}

// 150,000 dims: the message names the tensor and stays short.
TEST(ReadModelConfigTest, HugeDimsGiveABoundedReason) {
  std::string dims;
  for (int i = 0; i < 150000; ++i) absl::StrAppend(&dims, i == 0 ? "" : ",", "2");
  absl::Status status =
      ParseModelConfig(
          absl::StrCat("input [ { name: \"x\" data_type: TYPE_FP32 dims: [ ", dims, " ] } ]"), "m")
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), AllOf(HasSubstr("input 'x'"), HasSubstr("150000 dims")));
  EXPECT_LT(status.message().size(), 512u) << status.message().substr(0, 512);

  // Fixed dims that fit (all 1) reach the check against the model, through the registry: the
  // reason clients see (Index, Get) is bounded too.
  TempDir root;
  std::string ones;
  for (int i = 0; i < 150000; ++i) absl::StrAppend(&ones, i == 0 ? "" : ",", "1");
  root.WriteFile("m/1/model.onnx");
  root.WriteFile("m/config.pbtxt", absl::StrCat("input [ { name: \"x\" data_type: TYPE_FP32 "
                                                "dims: [ ",
                                                ones, " ] } ]"));
  ModelRegistry::Options options;
  options.root = root.path();
  options.loader = [](const std::string&, const engine::LoadOptions&) {
    return absl::StatusOr<std::shared_ptr<const engine::Model>>(testing::PassthroughModel());
  };
  ModelRegistry registry(options);
  ASSERT_TRUE(registry.LoadAll().ok());
  const std::vector<ModelRegistry::ModelState> index = registry.Index();
  ASSERT_EQ(index.size(), 1u);
  ASSERT_EQ(index[0].versions.size(), 1u);
  EXPECT_FALSE(index[0].versions[0].ready);
  EXPECT_THAT(index[0].versions[0].reason, HasSubstr("input 'x'"));
  EXPECT_LE(index[0].versions[0].reason.size(), kMaxStatusMessageBytes);
  EXPECT_LE(registry.Get("m", "").status().message().size(), kMaxStatusMessageBytes);
}

TEST(ModelRegistryFilesTest, FilesAndFoldersLeavingTheRepositoryAreLoadErrors) {
  Layout l;
  // A model folder linked from outside, a model file linked outside, a config symlinked to a
  // secret; and one model that is fine.
  l.outside.WriteFile("elsewhere/1/model.onnx");
  fs::create_directory_symlink(l.outside.path() + "/elsewhere", l.root.path() + "/escaped");
  l.root.MakeDir("linked/1");
  fs::create_symlink(l.secret(), l.root.path() + "/linked/1/model.onnx");
  l.root.WriteFile("leak/1/model.onnx");
  fs::create_symlink(l.secret(), l.root.path() + "/leak/config.pbtxt");
  l.root.WriteFile("ir/1/model.xml");
  fs::create_symlink(l.secret(), l.root.path() + "/ir/1/model.bin");
  l.root.WriteFile("good/1/model.onnx");
  l.root.WriteFile("good_ir/1/model.xml");  // its weights missing: the engine's to report
  ModelRegistry::Options options;
  options.root = l.root.path();
  options.loader = [](const std::string&, const engine::LoadOptions&) {
    return absl::StatusOr<std::shared_ptr<const engine::Model>>(testing::PassthroughModel());
  };
  ModelRegistry registry(options);
  ASSERT_TRUE(registry.LoadAll().ok());
  EXPECT_TRUE(registry.Get("good", "").ok());
  EXPECT_THAT(Message(registry.Get("escaped", "").status()),
              HasSubstr("model 'escaped': its folder resolves outside the model repository"));
  EXPECT_THAT(Message(registry.Get("linked", "").status()),
              HasSubstr("model file model.onnx resolves outside its model folder"));
  EXPECT_TRUE(registry.Get("good_ir", "").ok());
  EXPECT_THAT(Message(registry.Get("ir", "").status()),
              HasSubstr("weights file model.bin resolves outside its model folder"));
  EXPECT_THAT(Message(registry.Get("leak", "").status()),
              AllOf(HasSubstr("config.pbtxt resolves outside"), Not(HasSubstr(kSecret))));
  for (const ModelRegistry::ModelState& state : registry.Index()) {
    EXPECT_THAT(state.reason, Not(HasSubstr(kSecret)));
    EXPECT_THAT(state.reason, Not(HasSubstr(l.outside.path())));
  }
}

TEST(ModelRegistryFilesTest, AFifoWarmupFileFailsTheLoadWithoutBlocking) {
  TempDir root;
  root.WriteFile("m/1/model.onnx");
  root.WriteFile("m/config.pbtxt",
                 "model_warmup [ { name: \"w\" inputs [ { key: \"x\" value: { data_type: "
                 "TYPE_FP32 dims: [ 2 ] input_data_file: \"x.bin\" } } ] } ]");
  MakeFifo(root.path() + "/m/warmup/x.bin");
  ModelRegistry::Options options;
  options.root = root.path();
  options.loader = [](const std::string&, const engine::LoadOptions&) {
    return absl::StatusOr<std::shared_ptr<const engine::Model>>(
        testing::PassthroughModelOf({{"x", engine::DataType::kFloat32, std::vector<int64_t>{2}}}));
  };
  ModelRegistry registry(options);
  ASSERT_TRUE(registry.LoadAll().ok());
  EXPECT_THAT(Message(registry.Get("m", "1").status()),
              HasSubstr("input_data_file warmup/x.bin is a FIFO, not a regular file"));
}

// ---- Nesting depth: rejected before parsing, in linear time ----

std::string DeepJson(int depth) {
  return absl::StrCat("{\"model_config_list\": ", std::string(depth, '['), std::string(depth, ']'),
                      "}");
}

TEST(ConfigNestingTest, DeepJsonIsRejectedFast) {
  for (int depth : {10000, 100000}) {
    const absl::Time start = absl::Now();
    absl::Status status = ParseOvmsConfig(DeepJson(depth), "/").status();
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << depth;
    EXPECT_THAT(Message(status), HasSubstr("config.json: line 1: nested deeper than 32 levels"));
    // protobuf's parser took 10 s at depth 10,000 (and more at 100,000); the scan is linear.
    EXPECT_LT(took, absl::Seconds(2)) << depth;
  }
  // Also from a file.
  TempDir dir;
  dir.WriteFile("config.json", DeepJson(100000));
  EXPECT_THAT(Message(ReadOvmsConfig(dir.path() + "/config.json").status()),
              HasSubstr("nested deeper than"));
}

TEST(ConfigNestingTest, BracketsInStringsAndCommentsDoNotCount) {
  const std::string brackets(100, '[');
  EXPECT_TRUE(CheckConfigNesting(absl::StrCat("{\"a\": \"", brackets, "\\\"", brackets, "\"}"),
                                 ConfigSyntax::kJson, "j")
                  .ok());
  EXPECT_TRUE(CheckConfigNesting(absl::StrCat("# ", brackets, "\nname: '", brackets, "'\n"),
                                 ConfigSyntax::kProtobufText, "p")
                  .ok());
  EXPECT_THAT(Message(CheckConfigNesting(absl::StrCat("a {\n", std::string(40, '<')),
                                         ConfigSyntax::kProtobufText, "p")),
              HasSubstr("p: line 2: nested deeper than 32 levels"));
  // Exactly at the limit is fine.
  EXPECT_TRUE(
      CheckConfigNesting(std::string(32, '[') + std::string(32, ']'), ConfigSyntax::kJson, "j")
          .ok());
}

TEST(ConfigNestingTest, DeepConfigPbtxtIsRejectedFast) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "model_warmup { ";
  const absl::Time start = absl::Now();
  absl::Status status = ParseModelConfig(text, "m").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("model 'm': config.pbtxt: line 1: nested deeper than"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(OvmsConfigFileTest, AFifoOrDirectoryConfigJsonIsAnErrorNotAHang) {
  TempDir dir;
  MakeFifo(dir.path() + "/fifo.json");
  dir.MakeDir("dir.json");
  EXPECT_THAT(Message(ReadOvmsConfig(dir.path() + "/fifo.json").status()),
              HasSubstr("config.json is a FIFO, not a regular file"));
  EXPECT_THAT(Message(ReadOvmsConfig(dir.path() + "/dir.json").status()),
              HasSubstr("config.json is a directory"));
  EXPECT_EQ(ReadOvmsConfig(dir.path() + "/none.json").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace loopserve::server
