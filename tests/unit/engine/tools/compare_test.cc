#include "engine/tools/compare.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace loopserve::tools {
namespace {

using engine::DataType;
using engine::Shape;
using engine::Tensor;
using engine::Value;

template <typename T>
Tensor Make(DataType type, Shape shape, const std::vector<T>& values) {
  Tensor t(type, shape);
  for (size_t i = 0; i < values.size(); ++i) t.mutable_data<T>()[i] = values[i];
  return t;
}

TEST(CompareTest, FloatsWithinTolerance) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Tensor e = Make<float>(DataType::kFloat32, {4}, {1000, 0, nan, inf});
  Tensor a = Make<float>(DataType::kFloat32, {4}, {1000.9f, 5e-8f, nan, inf});
  EXPECT_EQ(CompareTensors(e, a), std::nullopt);

  Tensor far = Make<float>(DataType::kFloat32, {4}, {1002, 0, nan, inf});
  auto diff = CompareTensors(e, far);
  ASSERT_TRUE(diff.has_value());
  EXPECT_NE(diff->find("1 of 4 elements differ; first at [0]"), std::string::npos) << *diff;

  Tensor nan_vs_number = Make<float>(DataType::kFloat32, {4}, {1000, 0, 1, inf});
  EXPECT_TRUE(CompareTensors(e, nan_vs_number).has_value());
  Tensor wrong_inf = Make<float>(DataType::kFloat32, {4}, {1000, 0, nan, -inf});
  EXPECT_TRUE(CompareTensors(e, wrong_inf).has_value());
}

TEST(CompareTest, IntegersExact) {
  Tensor e = Make<int64_t>(DataType::kInt64, {2, 2}, {1, 2, 3, 4});
  Tensor a = Make<int64_t>(DataType::kInt64, {2, 2}, {1, 2, 3, 5});
  auto diff = CompareTensors(e, a);
  ASSERT_TRUE(diff.has_value());
  EXPECT_NE(diff->find("[1,1]: got 5, expected 4"), std::string::npos) << *diff;
}

TEST(CompareTest, TypeAndShapeMustMatch) {
  Tensor f = Make<float>(DataType::kFloat32, {2}, {1, 2});
  Tensor d = Make<double>(DataType::kFloat64, {2}, {1, 2});
  Tensor f3 = Make<float>(DataType::kFloat32, {1, 2}, {1, 2});
  EXPECT_NE(CompareTensors(f, d)->find("element type"), std::string::npos);
  EXPECT_NE(CompareTensors(f, f3)->find("shape [1,2], expected [2]"), std::string::npos);
}

TEST(CompareTest, HalfTypes) {
  // float16 1.0 = 0x3c00, 1.0009765625 = 0x3c01 (within rtol 1e-3 of 1.0).
  Tensor e = Make<uint16_t>(DataType::kFloat16, {1}, {0x3c00});
  Tensor a = Make<uint16_t>(DataType::kFloat16, {1}, {0x3c01});
  Tensor b = Make<uint16_t>(DataType::kFloat16, {1}, {0x3c10});
  EXPECT_EQ(CompareTensors(e, a), std::nullopt);
  EXPECT_TRUE(CompareTensors(e, b).has_value());
  // A bfloat16 result against the uint16 bit patterns the onnx 1.12 data use.
  Tensor ref = Make<uint16_t>(DataType::kUint16, {1}, {0x3f80});
  Tensor got = Make<uint16_t>(DataType::kBFloat16, {1}, {0x3f80});
  EXPECT_EQ(CompareTensors(ref, got), std::nullopt);
}

TEST(CompareTest, SequencesAndOptionals) {
  Value e;
  e.mutable_sequence().push_back(Make<int32_t>(DataType::kInt32, {1}, {1}));
  e.mutable_sequence().push_back(Make<int32_t>(DataType::kInt32, {1}, {2}));
  Value a;
  a.CopyFrom(e);
  EXPECT_EQ(CompareValues(e, a), std::nullopt);
  a.mutable_sequence()[1].mutable_data<int32_t>()[0] = 3;
  EXPECT_NE(CompareValues(e, a)->find("sequence element 1"), std::string::npos);
  a.mutable_sequence().pop_back();
  EXPECT_NE(CompareValues(e, a)->find("sequence of 1 tensors, expected 2"), std::string::npos);

  EXPECT_EQ(CompareValues(Value(), Value()), std::nullopt);
  EXPECT_TRUE(CompareValues(Value(), e).has_value());
  Value empty_sequence;
  empty_sequence.mutable_sequence();
  EXPECT_TRUE(CompareValues(Value(), empty_sequence).has_value());
}

}  // namespace
}  // namespace loopserve::tools
