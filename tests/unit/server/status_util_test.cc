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
