#include "server/status_util.h"

#include "gtest/gtest.h"

namespace loopserve::server {
namespace {

TEST(StatusUtilTest, EveryCanonicalCodeKeepsItsNumberAndMessage) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), "what went wrong");
    const grpc::Status converted = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(converted.error_code()), code);
    EXPECT_EQ(converted.error_message(), "what went wrong");
  }
}

TEST(StatusUtilTest, OkIsOk) { EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok()); }

TEST(StatusUtilTest, LongMessagesAreCutAtACharacterBoundary) {
  const std::string exact(kMaxStatusMessageBytes, 'a');
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError(exact)).error_message(), exact);
  // 400 KB of a two-byte UTF-8 character: the cut never splits one.
  std::string long_text;
  for (int i = 0; i < 200000; ++i) long_text += "\xc3\xa9";
  const std::string cut = ToGrpcStatus(absl::InvalidArgumentError(long_text)).error_message();
  EXPECT_LE(cut.size(), kMaxStatusMessageBytes);
  const std::string tail = " ... (400000 bytes in all)";
  ASSERT_GT(cut.size(), tail.size());
  EXPECT_EQ(cut.substr(cut.size() - tail.size()), tail);
  const std::string kept = cut.substr(0, cut.size() - tail.size());
  EXPECT_EQ(kept.size() % 2, 0u);
  EXPECT_EQ(kept, long_text.substr(0, kept.size()));
}

TEST(StatusUtilTest, NamedCodesMatchGrpc) {
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::DeadlineExceededError("")).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(ToGrpcStatus(absl::CancelledError("")).error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcStatus(absl::UnimplementedError("")).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(ToGrpcStatus(absl::InternalError("")).error_code(), grpc::StatusCode::INTERNAL);
}

TEST(StatusUtilTest, OutcomeLabels) {
  EXPECT_EQ(OutcomeLabel(absl::StatusCode::kOk), "success");
  EXPECT_EQ(OutcomeLabel(absl::StatusCode::kInvalidArgument), "invalid_argument");
  EXPECT_EQ(OutcomeLabel(absl::StatusCode::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_EQ(OutcomeLabel(absl::StatusCode::kResourceExhausted), "resource_exhausted");
}

}  // namespace
}  // namespace loopserve::server
