// Shape, Size, Reshape, Squeeze, Unsqueeze, Flatten.

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

Tensor Iota(const Shape& shape) {
  Tensor t(DataType::kFloat32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.mutable_data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(ShapeTest, WholeShape) {
  ExpectTensor<int64_t>(RunOk(OpCase("Shape", 13).In(Iota({2, 3, 4}))), {3}, {2, 3, 4});
}

TEST(ShapeTest, ScalarGivesEmpty) {
  ExpectTensor<int64_t>(RunOk(OpCase("Shape", 13).In(Scalar<float>(1))), {0}, {});
}

// The spec's opset 15 examples on a [2,3,4] input.
TEST(ShapeTest, Opset15StartEnd) {
  ExpectTensor<int64_t>(RunOk(OpCase("Shape", 15).In(Iota({2, 3, 4})).Attr("start", IntAttr(-1))),
                        {1}, {4});
  ExpectTensor<int64_t>(RunOk(OpCase("Shape", 15).In(Iota({2, 3, 4})).Attr("end", IntAttr(-1))),
                        {2}, {2, 3});
  ExpectTensor<int64_t>(RunOk(OpCase("Shape", 15)
                                  .In(Iota({2, 3, 4}))
                                  .Attr("start", IntAttr(1))
                                  .Attr("end", IntAttr(2))),
                        {1}, {3});
  // Out-of-range values clamp: start < -r is 0, end > r is r.
  ExpectTensor<int64_t>(RunOk(OpCase("Shape", 15)
                                  .In(Iota({2, 3, 4}))
                                  .Attr("start", IntAttr(-10))
                                  .Attr("end", IntAttr(10))),
                        {3}, {2, 3, 4});
  ExpectTensor<int64_t>(RunOk(OpCase("Shape", 15)
                                  .In(Iota({2, 3, 4}))
                                  .Attr("start", IntAttr(2))
                                  .Attr("end", IntAttr(1))),
                        {0}, {});
}

TEST(SizeTest, CountsElements) {
  ExpectTensor<int64_t>(RunOk(OpCase("Size", 13).In(Iota({3, 5}))), {}, {15});
  ExpectTensor<int64_t>(RunOk(OpCase("Size", 13).In(Iota({3, 0}))), {}, {0});
  ExpectTensor<int64_t>(RunOk(OpCase("Size", 1).In(Scalar<bool>(true))), {}, {1});
}

TEST(ReshapeTest, InferAndCopyDims) {
  // ONNX test_reshape_reduced_dims: [2,3,4] -> [2,12]; 0 copies, -1 infers.
  Tensor y = RunOk(OpCase("Reshape", 13).In(Iota({2, 3, 4})).In(I64({0, -1})));
  ASSERT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(y.data<float>()[13], 13.0f);
  y = RunOk(OpCase("Reshape", 13).In(Iota({2, 3, 4})).In(I64({-1, 2, 2})));
  EXPECT_EQ(y.shape(), (Shape{6, 2, 2}));
  y = RunOk(OpCase("Reshape", 13).In(Iota({2, 3, 4})).In(I64({0, 0, -1, 1})));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4, 1}));
}

TEST(ReshapeTest, Bool) {
  ExpectTensor<bool>(
      RunOk(OpCase("Reshape", 14).In(Make<bool>({2, 2}, {true, false, false, true})).In(I64({4}))),
      {4}, {true, false, false, true});
}

TEST(ReshapeTest, AllowZero) {
  // test_reshape_allowzero_reordered: [0,3,4] with allowzero and shape [3,4,0].
  Tensor x(DataType::kFloat32, Shape{0, 3, 4});
  Tensor y = RunOk(
      OpCase("Reshape", 14).In(std::move(x)).In(I64({3, 4, 0})).Attr("allowzero", IntAttr(1)));
  EXPECT_EQ(y.shape(), (Shape{3, 4, 0}));
  // Without allowzero, 0 copies the input dim.
  y = RunOk(OpCase("Reshape", 14).In(Iota({2, 3})).In(I64({0, 3})));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  ExpectError(OpCase("Reshape", 14).In(Iota({2, 3})).In(I64({0, -1})).Attr("allowzero", IntAttr(1)),
              absl::StatusCode::kInvalidArgument, "allowzero");
}

TEST(ReshapeTest, Opset1ShapeAttribute) {
  Tensor y = RunOk(OpCase("Reshape", 1).In(Iota({2, 3})).Attr("shape", IntsAttr({3, -1})));
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
}

TEST(ReshapeTest, Errors) {
  ExpectError(OpCase("Reshape", 13).In(Iota({2, 3})).In(I64({4, -1})),
              absl::StatusCode::kInvalidArgument, "cannot reshape");
  ExpectError(OpCase("Reshape", 13).In(Iota({2, 3})).In(I64({-1, -1})),
              absl::StatusCode::kInvalidArgument, "more than one -1");
  ExpectError(OpCase("Reshape", 13).In(Iota({2, 3})).In(I64({-2, 3})),
              absl::StatusCode::kInvalidArgument, "invalid dim -2");
  ExpectError(OpCase("Reshape", 13).In(Iota({2, 3})).In(I64({1, 0, 0})),
              absl::StatusCode::kInvalidArgument, "0 at index 2");
  ExpectError(OpCase("Reshape", 13).In(Iota({2, 3})).In(Make<int32_t>({2}, {3, 2})),
              absl::StatusCode::kInvalidArgument, "must be int64");
  ExpectError(OpCase("Reshape", 13).In(Iota({2, 3})), absl::StatusCode::kInvalidArgument,
              "expects 2 inputs, got 1");
  ExpectError(OpCase("Reshape", 13).In(Iota({1})).In(I64({int64_t{1} << 30, int64_t{1} << 30, 1})),
              absl::StatusCode::kInvalidArgument, "2^40");
}

TEST(SqueezeTest, AxesInputNegative) {
  Tensor y = RunOk(OpCase("Squeeze", 13).In(Iota({1, 3, 1, 5})).In(I64({-2})));
  EXPECT_EQ(y.shape(), (Shape{1, 3, 5}));
  y = RunOk(OpCase("Squeeze", 13).In(Iota({1, 3, 1, 5})));
  EXPECT_EQ(y.shape(), (Shape{3, 5}));
  EXPECT_EQ(y.data<float>()[7], 7.0f);
}

TEST(SqueezeTest, AxesAttribute) {
  Tensor y = RunOk(OpCase("Squeeze", 11).In(Iota({1, 3, 1})).Attr("axes", IntsAttr({0})));
  EXPECT_EQ(y.shape(), (Shape{3, 1}));
  y = RunOk(OpCase("Squeeze", 1).In(Iota({1, 3, 1})));
  EXPECT_EQ(y.shape(), (Shape{3}));
}

TEST(SqueezeTest, Errors) {
  ExpectError(OpCase("Squeeze", 13).In(Iota({1, 3})).In(I64({1})),
              absl::StatusCode::kInvalidArgument, "cannot squeeze axis 1");
  ExpectError(OpCase("Squeeze", 13).In(Iota({1, 3})).In(I64({2})),
              absl::StatusCode::kInvalidArgument, "axis 2 is out of range for rank 2");
}

TEST(UnsqueezeTest, AxesRelativeToOutput) {
  // test_unsqueeze_unsorted_axes: [3,4,5] with axes [5,4,2] -> [3,4,1,5,1,1].
  Tensor y = RunOk(OpCase("Unsqueeze", 13).In(Iota({3, 4, 5})).In(I64({5, 4, 2})));
  EXPECT_EQ(y.shape(), (Shape{3, 4, 1, 5, 1, 1}));
  // test_unsqueeze_negative_axes: [1,3,1,5] with axes [-2] -> [1,3,1,1,5].
  y = RunOk(OpCase("Unsqueeze", 13).In(Iota({1, 3, 1, 5})).In(I64({-2})));
  EXPECT_EQ(y.shape(), (Shape{1, 3, 1, 1, 5}));
  ExpectTensor<int64_t>(RunOk(OpCase("Unsqueeze", 13).In(Scalar<int64_t>(7)).In(I64({0}))), {1},
                        {7});
}

TEST(UnsqueezeTest, AxesAttribute) {
  Tensor y = RunOk(OpCase("Unsqueeze", 11).In(Iota({3})).Attr("axes", IntsAttr({0, -1})));
  EXPECT_EQ(y.shape(), (Shape{1, 3, 1}));
}

TEST(UnsqueezeTest, Errors) {
  ExpectError(OpCase("Unsqueeze", 13).In(Iota({3})).In(I64({0, 0})),
              absl::StatusCode::kInvalidArgument, "repeated");
  ExpectError(OpCase("Unsqueeze", 13).In(Iota({3})).In(I64({3})),
              absl::StatusCode::kInvalidArgument, "out of range");
  ExpectError(OpCase("Unsqueeze", 13).In(Iota({3})), absl::StatusCode::kInvalidArgument,
              "expects 2 inputs");
  ExpectError(OpCase("Unsqueeze", 11).In(Iota({3})), absl::StatusCode::kInvalidArgument,
              "'axes' is required");
}

TEST(FlattenTest, Axes) {
  // test_flatten_axis*: [2,3,4,5].
  EXPECT_EQ(RunOk(OpCase("Flatten", 13).In(Iota({2, 3, 4, 5})).Attr("axis", IntAttr(0))).shape(),
            (Shape{1, 120}));
  EXPECT_EQ(RunOk(OpCase("Flatten", 13).In(Iota({2, 3, 4, 5}))).shape(), (Shape{2, 60}));
  EXPECT_EQ(RunOk(OpCase("Flatten", 13).In(Iota({2, 3, 4, 5})).Attr("axis", IntAttr(4))).shape(),
            (Shape{120, 1}));
  EXPECT_EQ(RunOk(OpCase("Flatten", 13).In(Iota({2, 3, 4, 5})).Attr("axis", IntAttr(-1))).shape(),
            (Shape{24, 5}));
  ExpectError(OpCase("Flatten", 13).In(Iota({2, 3})).Attr("axis", IntAttr(3)),
              absl::StatusCode::kInvalidArgument, "axis 3 is out of range");
}

}  // namespace
}  // namespace loopserve::engine::native_test
