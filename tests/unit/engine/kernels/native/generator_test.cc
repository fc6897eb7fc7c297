// Range, ConstantOfShape.

#include <limits>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

TEST(RangeTest, SpecExamples) {
  // Example 1: start 3, limit 9, delta 3 -> [3, 6].
  ExpectTensor<int64_t>(
      RunOk(
          OpCase("Range", 11).In(Scalar<int64_t>(3)).In(Scalar<int64_t>(9)).In(Scalar<int64_t>(3))),
      {2}, {3, 6});
  // Example 2: start 10, limit 4, delta -2 -> [10, 8, 6].
  ExpectTensor<int32_t>(RunOk(OpCase("Range", 11)
                                  .In(Scalar<int32_t>(10))
                                  .In(Scalar<int32_t>(4))
                                  .In(Scalar<int32_t>(-2))),
                        {3}, {10, 8, 6});
  // test_range_float_type_positive_delta: 1, 5, 2 -> [1, 3].
  ExpectTensor<float>(
      RunOk(OpCase("Range", 11).In(Scalar<float>(1)).In(Scalar<float>(5)).In(Scalar<float>(2))),
      {2}, {1, 3});
  // ceil((5 - 0) / 0.5) = 10 elements.
  EXPECT_EQ(
      RunOk(OpCase("Range", 11).In(Scalar<double>(0)).In(Scalar<double>(5)).In(Scalar<double>(0.5)))
          .shape(),
      (Shape{10}));
  // Wrong direction: empty.
  ExpectTensor<int64_t>(
      RunOk(
          OpCase("Range", 11).In(Scalar<int64_t>(5)).In(Scalar<int64_t>(1)).In(Scalar<int64_t>(1))),
      {0}, {});
}

TEST(RangeTest, Errors) {
  ExpectError(
      OpCase("Range", 11).In(Scalar<int64_t>(0)).In(Scalar<int64_t>(5)).In(Scalar<int64_t>(0)),
      absl::StatusCode::kInvalidArgument, "delta must not be 0");
  ExpectError(OpCase("Range", 11)
                  .In(Scalar<int64_t>(std::numeric_limits<int64_t>::min()))
                  .In(Scalar<int64_t>(std::numeric_limits<int64_t>::max()))
                  .In(Scalar<int64_t>(1)),
              absl::StatusCode::kInvalidArgument, "limit 2^40");
  ExpectError(
      OpCase("Range", 11).In(Scalar<float>(0)).In(Scalar<float>(1e30f)).In(Scalar<float>(1e-30f)),
      absl::StatusCode::kInvalidArgument, "limit 2^40");
  ExpectError(
      OpCase("Range", 11).In(Scalar<int64_t>(0)).In(Scalar<int32_t>(5)).In(Scalar<int64_t>(1)),
      absl::StatusCode::kInvalidArgument, "one element type");
  ExpectError(
      OpCase("Range", 11).In(Scalar<uint8_t>(0)).In(Scalar<uint8_t>(5)).In(Scalar<uint8_t>(1)),
      absl::StatusCode::kInvalidArgument, "uint8");
  ExpectError(OpCase("Range", 11).In(I64({0, 1})).In(Scalar<int64_t>(5)).In(Scalar<int64_t>(1)),
              absl::StatusCode::kInvalidArgument, "scalars");
}

TEST(ConstantOfShapeTest, ValueAndDefault) {
  // Default: float32 zeros.
  ExpectTensor<float>(RunOk(OpCase("ConstantOfShape", 9).In(I64({2, 3}))), {2, 3},
                      {0, 0, 0, 0, 0, 0});
  ExpectTensor<int64_t>(RunOk(OpCase("ConstantOfShape", 9)
                                  .In(I64({3}))
                                  .Attr("value", TensorAttr(Make<int64_t>({1}, {7})))),
                        {3}, {7, 7, 7});
  ExpectTensor<bool>(RunOk(OpCase("ConstantOfShape", 9)
                               .In(I64({2}))
                               .Attr("value", TensorAttr(Make<bool>({1}, {true})))),
                     {2}, {true, true});
  // An empty shape gives a scalar; a 0 dim gives an empty tensor.
  ExpectTensor<float>(RunOk(OpCase("ConstantOfShape", 9).In(Tensor(DataType::kInt64, {0}))), {},
                      {0});
  ExpectTensor<float>(RunOk(OpCase("ConstantOfShape", 9).In(I64({4, 0}))), {4, 0}, {});
}

TEST(ConstantOfShapeTest, Errors) {
  ExpectError(OpCase("ConstantOfShape", 9).In(I64({2, -1})), absl::StatusCode::kInvalidArgument,
              "negative dimension");
  ExpectError(OpCase("ConstantOfShape", 9).In(I64({int64_t{1} << 21, int64_t{1} << 21})),
              absl::StatusCode::kInvalidArgument, "2^40");
  ExpectError(OpCase("ConstantOfShape", 9).In(Make<int32_t>({1}, {2})),
              absl::StatusCode::kInvalidArgument, "int64");
  ExpectError(OpCase("ConstantOfShape", 9)
                  .In(I64({2}))
                  .Attr("value", TensorAttr(Make<int64_t>({2}, {1, 2}))),
              absl::StatusCode::kInvalidArgument, "one element");
}

}  // namespace
}  // namespace loopserve::engine::native_test
