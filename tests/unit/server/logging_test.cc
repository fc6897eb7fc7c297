#include "server/observability/logging.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// The logging extension's settings are process-wide: each test puts back what it found.
class LogSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = CurrentLogSettings(); }
  void TearDown() override {
    SetLogDirectory("");
    EXPECT_TRUE(UpdateLogSettings(saved_).ok());
  }
  LogSettingList saved_;
};

TEST_F(LogSettingsTest, ALogFileIsAPlainNameInTheLogFolder) {
  std::string pattern = (fs::temp_directory_path() / "logging_test-XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  const std::string dir = pattern;
  // Without --log_dir no file at all.
  EXPECT_EQ(UpdateLogSettings({{"log_file", std::string("server.log")}}).code(),
            absl::StatusCode::kFailedPrecondition);
  SetLogDirectory(dir);
  for (const std::string& name :
       {std::string("../escape.log"), std::string("/tmp/x.log"), std::string("a/b.log"),
        std::string("."), std::string(".."), std::string("a\0b", 3), std::string(256, 'x')}) {
    EXPECT_EQ(UpdateLogSettings({{"log_file", name}}).code(), absl::StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_FALSE(fs::exists(fs::path(dir).parent_path() / "escape.log"));
  // A name the file system refuses (a folder of that name): INTERNAL, the name escaped.
  fs::create_directory(fs::path(dir) / "sub\ndir");
  const absl::Status refused = UpdateLogSettings({{"log_file", std::string("sub\ndir")}});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(refused.message(), HasSubstr("'sub\\ndir'"));
  ASSERT_TRUE(UpdateLogSettings({{"log_file", std::string("server.log")}}).ok());
  LogError("a line for the log file");
  EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / "server.log"));
  EXPECT_GT(fs::file_size(fs::path(dir) / "server.log"), 0u);
  ASSERT_TRUE(UpdateLogSettings({{"log_file", std::string("")}}).ok());
  fs::remove_all(dir);
}

TEST_F(LogSettingsTest, WrongNamesTypesAndFormatsChangeNothing) {
  const LogSettingList cases[] = {
      {{"log_everything", true}},
      {{"log_info", std::string("yes")}},
      {{"log_verbose_level", true}},
      {{"log_format", std::string("json")}},
      {{"log_info", false}, {"log_format", uint32_t{1}}},  // all or none
  };
  for (const LogSettingList& changes : cases) {
    EXPECT_EQ(UpdateLogSettings(changes).code(), absl::StatusCode::kInvalidArgument)
        << changes[0].first;
    EXPECT_EQ(CurrentLogSettings(), saved_) << changes[0].first;
  }
}

}  // namespace
}  // namespace loopserve::server
