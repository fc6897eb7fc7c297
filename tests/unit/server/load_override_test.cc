#include "server/repository/load_override.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

using Files = std::vector<std::pair<std::string, std::string>>;

class WriteLoadFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "load_override_test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    dir_ = root_ + "/model";
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string root_;
  std::string dir_;
};

TEST_F(WriteLoadFilesTest, WritesTheFilesInTheirFolders) {
  ASSERT_TRUE(WriteLoadFiles(dir_, {{"1/model.onnx", "abc"}, {"config.pbtxt", ""}}).ok());
  std::ifstream in(dir_ + "/1/model.onnx", std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  EXPECT_EQ(contents.str(), "abc");
  EXPECT_TRUE(fs::is_regular_file(dir_ + "/config.pbtxt"));
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(WriteLoadFilesTest, PathsLeavingTheFolderOrNamedTwiceAreInvalid) {
  const Files cases[] = {
      {{"../escape.onnx", "x"}},
      {{"/etc/passwd", "x"}},
      {{"1/../../x", "x"}},
      {{"1//model.onnx", "x"}},
      {{"./model.onnx", "x"}},
      {{"", "x"}},
      {{std::string("1/a\0b", 5), "x"}},
      {{"1/model.onnx", "x"}, {"1/model.onnx", "y"}},
  };
  for (const Files& files : cases) {
    const absl::Status status = WriteLoadFiles(dir_, files);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << files[0].first;
    EXPECT_FALSE(fs::exists(dir_)) << files[0].first;  // checked before anything is written
  }
  EXPECT_FALSE(fs::exists(root_ + "/escape.onnx"));
}

// A file that is also a folder of another file, in either order: the client's mistake
// (INVALID_ARGUMENT), not the server's (the second order used to fail open(O_EXCL): INTERNAL).
TEST_F(WriteLoadFilesTest, AFileThatIsAlsoAFolderIsInvalid) {
  const Files orders[] = {
      {{"1", "x"}, {"1/model.onnx", "y"}},
      {{"1/model.onnx", "y"}, {"1", "x"}},
      {{"a/b/c", "y"}, {"a/b", "x"}},
  };
  for (const Files& files : orders) {
    const absl::Status status = WriteLoadFiles(dir_, files);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << files[0].first;
    EXPECT_THAT(status.message(), HasSubstr("a file of the request and a folder of"));
  }
}

TEST(ConfigJsonToTextTest, AModelConfigInJsonBecomesText) {
  absl::StatusOr<std::string> text =
      ConfigJsonToText(R"({"name": "m", "max_batch_size": 4, "backend": "onnxruntime"})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("max_batch_size: 4"));
  EXPECT_THAT(*text, HasSubstr("backend: \"onnxruntime\""));
}

TEST(ConfigJsonToTextTest, NotAModelConfigIsInvalid) {
  for (const char* json : {"", "[", "{\"no_such_field\": 1}", "{\"max_batch_size\": \"x\"}",
                           "[1, 2]", "{\"input\": 5}"}) {
    EXPECT_EQ(ConfigJsonToText(json).status().code(), absl::StatusCode::kInvalidArgument) << json;
  }
}

}  // namespace
}  // namespace loopserve::server
