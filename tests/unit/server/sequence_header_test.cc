// The sticky-sequence header (issue 33): a client sends a sequence's id in the
// loopserve-sequence-id header (HTTP) or metadata key (gRPC) so that a balancer can hash on it;
// the server takes the id from it when the request has no sequence_id parameter and refuses a
// request whose header and parameter name different sequences.

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/runner/infer_request.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;

TEST(SequenceHeaderTest, NoHeaderLeavesTheRequestAlone) {
  InferenceRequest request;
  request.sequence.id = 7;
  ASSERT_TRUE(ApplySequenceIdHeader(std::nullopt, &request).ok());
  EXPECT_EQ(request.sequence.id, 7u);
  InferenceRequest plain;
  ASSERT_TRUE(ApplySequenceIdHeader(std::nullopt, &plain).ok());
  EXPECT_FALSE(plain.sequence.present());
}

TEST(SequenceHeaderTest, TheHeaderGivesTheIdWhenTheParameterIsAbsent) {
  InferenceRequest numeric;
  ASSERT_TRUE(ApplySequenceIdHeader(absl::string_view("18446744073709551615"), &numeric).ok());
  EXPECT_EQ(numeric.sequence.id, 18446744073709551615u);  // UINT64_MAX
  EXPECT_EQ(numeric.sequence.string_id, "");

  InferenceRequest text;
  ASSERT_TRUE(ApplySequenceIdHeader(absl::string_view("stream-42"), &text).ok());
  EXPECT_EQ(text.sequence.id, 0u);
  EXPECT_EQ(text.sequence.string_id, "stream-42");

  // Not a uint64 (a sign, 0, past 2^64 - 1): a string id, as Triton reads a string sequence_id.
  for (const char* value : {"+5", "0", "18446744073709551616"}) {
    InferenceRequest r;
    ASSERT_TRUE(ApplySequenceIdHeader(absl::string_view(value), &r).ok()) << value;
    EXPECT_EQ(r.sequence.id, 0u) << value;
    EXPECT_EQ(r.sequence.string_id, value);
  }
}

TEST(SequenceHeaderTest, HeaderAndParameterMustNameTheSameSequence) {
  InferenceRequest same;
  same.sequence.id = 42;
  EXPECT_TRUE(ApplySequenceIdHeader(absl::string_view("42"), &same).ok());

  InferenceRequest other;
  other.sequence.id = 42;
  const absl::Status status = ApplySequenceIdHeader(absl::string_view("43"), &other);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("loopserve-sequence-id"));
  EXPECT_EQ(other.sequence.id, 42u);

  InferenceRequest string_vs_number;
  string_vs_number.sequence.string_id = "42";
  EXPECT_EQ(ApplySequenceIdHeader(absl::string_view("42"), &string_vs_number).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SequenceHeaderTest, EmptyOrOverlongHeadersAreRefused) {
  InferenceRequest request;
  EXPECT_EQ(ApplySequenceIdHeader(absl::string_view(""), &request).code(),
            absl::StatusCode::kInvalidArgument);
  const std::string long_id(257, 'x');
  EXPECT_EQ(ApplySequenceIdHeader(absl::string_view(long_id), &request).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(request.sequence.present());
}

}  // namespace
}  // namespace loopserve::server
