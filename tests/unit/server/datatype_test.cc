#include "server/datatype.h"

#include "gtest/gtest.h"

namespace loopserve::server {
namespace {

using engine::DataType;

TEST(DatatypeTest, RoundTripsEveryKserveType) {
  for (const char* name : {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                           "INT64", "FP16", "FP32", "FP64", "BF16"}) {
    absl::StatusOr<DataType> type = DataTypeFromKserve(name);
    ASSERT_TRUE(type.ok()) << name;
    EXPECT_EQ(KserveDataType(*type), name);
  }
  EXPECT_EQ(*DataTypeFromKserve("FP32"), DataType::kFloat32);
  EXPECT_EQ(*DataTypeFromKserve("INT64"), DataType::kInt64);
}

TEST(DatatypeTest, RejectsUnknownAndLowerCaseNamesAndMapsBytesToStrings) {
  EXPECT_EQ(DataTypeFromKserve("fp32").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataTypeFromKserve("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataTypeFromKserve("FLOAT").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*DataTypeFromKserve("BYTES"), DataType::kString);
  EXPECT_EQ(KserveDataType(DataType::kString), "BYTES");
  EXPECT_EQ(KserveDataType(DataType::kUndefined), "");
}

}  // namespace
}  // namespace loopserve::server
