#include "server/shm/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;

// A POSIX shared-memory segment of `size` bytes, filled with 0, 1, 2, ... (mod 256); removed at
// the end of the test.
class Segment {
 public:
  explicit Segment(size_t size)
      : key_(absl::StrCat("/loopserve_shm_test_", getpid(), "_", counter_++)) {
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0) << key_;
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0);
    for (size_t i = 0; i < size; ++i) {
      const unsigned char byte = static_cast<unsigned char>(i);
      EXPECT_EQ(pwrite(fd_, &byte, 1, static_cast<off_t>(i)), 1);
    }
  }
  ~Segment() {
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  int fd() const { return fd_; }

 private:
  static inline int counter_ = 0;
  std::string key_;
  int fd_ = -1;
};

TEST(SharedMemoryTest, RegisterMapAndList) {
  Segment segment(8192);
  SharedMemoryManager manager;
  ASSERT_TRUE(manager.Register("r", segment.key(), 4100, 64).ok());
  auto view = manager.Map({"r", 10, 16}, "input 'x'");
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->size, 16u);
  // Byte k of the segment is k mod 256: the view starts at 4100 + 10.
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(static_cast<unsigned char>(view->data[i]), (4110 + i) % 256) << i;
  }
  auto list = manager.List("");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].key, segment.key());
  EXPECT_EQ((*list)[0].offset, 4100u);
  EXPECT_EQ((*list)[0].byte_size, 64u);
  EXPECT_EQ(manager.List("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(SharedMemoryTest, BoundsAreChecked) {
  Segment segment(100);
  SharedMemoryManager manager;
  // The region past the segment's end, at registration.
  absl::Status past = manager.Register("r", segment.key(), 50, 51);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(past.message(), HasSubstr("runs past the end of segment"));
  EXPECT_EQ(manager.Register("r", segment.key(), 101, 0).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(manager.Register("r", segment.key(), 50, 50).ok());
  EXPECT_EQ(manager.Register("r", segment.key(), 0, 1).code(), absl::StatusCode::kAlreadyExists);
  // A tensor larger than the region, an offset past its end, a huge offset that would wrap.
  EXPECT_EQ(manager.Map({"r", 0, 51}, "input 'x'").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager.Map({"r", 51, 0}, "input 'x'").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager.Map({"r", ~uint64_t{0}, 2}, "input 'x'").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(manager.Map({"r", 50, 0}, "input 'x'").ok());
  absl::Status unknown = manager.Map({"nope", 0, 1}, "input 'x'").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("Unable to find shared memory region: 'nope'"));
}

TEST(SharedMemoryTest, BadKeysAndMissingSegments) {
  SharedMemoryManager manager;
  for (const std::string key : {"", "/", "noslash", "/a/b", "/..", "/../etc/passwd"}) {
    EXPECT_EQ(manager.Register("r", key, 0, 1).code(), absl::StatusCode::kInvalidArgument) << key;
  }
  const absl::Status missing = manager.Register("r", "/loopserve_shm_test_missing", 0, 1);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("Unable to open shared memory region"));
  EXPECT_EQ(manager.Register("", "/x", 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(manager.List("").value().empty());
}

TEST(SharedMemoryTest, UnregisteredWhileInUseStaysMapped) {
  Segment segment(4096);
  SharedMemoryManager manager;
  ASSERT_TRUE(manager.Register("r", segment.key(), 0, 4096).ok());
  auto view = manager.Map({"r", 0, 4096}, "output 'y'");
  ASSERT_TRUE(view.ok());
  ASSERT_TRUE(manager.Unregister("r").ok());
  EXPECT_EQ(manager.Map({"r", 0, 1}, "input 'x'").status().code(), absl::StatusCode::kNotFound);
  // The request holding the view still reads and writes its region.
  std::memset(view->data, 7, 4096);
  unsigned char byte = 0;
  ASSERT_EQ(pread(segment.fd(), &byte, 1, 4095), 1);
  EXPECT_EQ(byte, 7);
  EXPECT_TRUE(manager.Unregister("r").ok());  // idempotent, as Triton's
  EXPECT_TRUE(manager.Unregister("").ok());
}

TEST(SharedMemoryTest, TruncatedSegmentIsAnErrorNotAFault) {
  Segment segment(8192);
  SharedMemoryManager manager;
  ASSERT_TRUE(manager.Register("r", segment.key(), 0, 8192).ok());
  ASSERT_EQ(ftruncate(segment.fd(), 100), 0);
  const absl::Status shrunk = manager.Map({"r", 0, 8192}, "input 'x'").status();
  EXPECT_EQ(shrunk.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shrunk.message(), HasSubstr("truncated"));
  EXPECT_TRUE(manager.Map({"r", 0, 100}, "input 'x'").ok());
}

TEST(SharedMemoryTest, AnotherUsersSegmentIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a segment to another user";
  Segment segment(64);
  ASSERT_EQ(fchown(segment.fd(), 65534, 65534), 0);
  SharedMemoryManager manager;
  const absl::Status status = manager.Register("r", segment.key(), 0, 64);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("belongs to user 65534"));
}

TEST(SharedMemoryTest, WriteTensorChecksTheSize) {
  Segment segment(64);
  SharedMemoryManager manager;
  ASSERT_TRUE(manager.Register("r", segment.key(), 0, 64).ok());
  auto view = manager.Map({"r", 0, 8}, "output 'y'");
  ASSERT_TRUE(view.ok());
  engine::Tensor small(engine::DataType::kInt32, engine::Shape{2});
  small.mutable_data<int32_t>()[0] = 0x01020304;
  small.mutable_data<int32_t>()[1] = -1;
  auto written = WriteTensorToSharedMemory("output 'y'", small, *view);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, 8u);
  int32_t back[2];
  std::memcpy(back, view->data, 8);
  EXPECT_EQ(back[0], 0x01020304);
  EXPECT_EQ(back[1], -1);
  engine::Tensor large(engine::DataType::kInt32, engine::Shape{3});
  const absl::Status too_big = WriteTensorToSharedMemory("output 'y'", large, *view).status();
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.message(), HasSubstr("should be at least 12 bytes"));
}

}  // namespace
}  // namespace loopserve::server
