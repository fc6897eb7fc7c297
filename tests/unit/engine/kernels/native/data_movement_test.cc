// Identity, Concat, Slice, Gather, Transpose, Expand, Tile.

#include <limits>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// [[1,2,3,4],[5,6,7,8]] as used by the Slice spec examples.
Tensor Slice2x4() { return Make<int32_t>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}); }

TEST(IdentityTest, CopiesAnyType) {
  ExpectTensor<bool>(RunOk(OpCase("Identity", 16).In(Make<bool>({2}, {true, false}))), {2},
                     {true, false});
  ExpectTensor<int64_t>(RunOk(OpCase("Identity", 1).In(Tensor(DataType::kInt64, Shape{0, 3}))),
                        {0, 3}, {});
}

TEST(ConcatTest, Axes) {
  Tensor a = Make<int64_t>({2, 2}, {1, 2, 3, 4});
  Tensor b = Make<int64_t>({2, 2}, {5, 6, 7, 8});
  ExpectTensor<int64_t>(RunOk(OpCase("Concat", 13)
                                  .In(Make<int64_t>({2, 2}, {1, 2, 3, 4}))
                                  .In(Make<int64_t>({2, 2}, {5, 6, 7, 8}))
                                  .Attr("axis", IntAttr(0))),
                        {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  ExpectTensor<int64_t>(
      RunOk(OpCase("Concat", 13).In(std::move(a)).In(std::move(b)).Attr("axis", IntAttr(-1))),
      {2, 4}, {1, 2, 5, 6, 3, 4, 7, 8});
}

TEST(ConcatTest, EmptyAndBoolAndOpset1Default) {
  ExpectTensor<bool>(RunOk(OpCase("Concat", 13)
                               .In(Make<bool>({1}, {true}))
                               .In(Tensor(DataType::kBool, Shape{0}))
                               .In(Make<bool>({2}, {false, true}))
                               .Attr("axis", IntAttr(0))),
                     {3}, {true, false, true});
  // Opset 1 defaults the axis to 1.
  ExpectTensor<float>(
      RunOk(OpCase("Concat", 1).In(Make<float>({1, 1}, {1})).In(Make<float>({1, 2}, {2, 3}))),
      {1, 3}, {1, 2, 3});
}

TEST(ConcatTest, Errors) {
  ExpectError(OpCase("Concat", 13)
                  .In(Make<float>({1, 2}, {1, 2}))
                  .In(Make<float>({1, 3}, {1, 2, 3}))
                  .Attr("axis", IntAttr(0)),
              absl::StatusCode::kInvalidArgument, "input 1 has shape [1,3]");
  ExpectError(OpCase("Concat", 13)
                  .In(Make<float>({1}, {1}))
                  .In(Make<int32_t>({1}, {1}))
                  .Attr("axis", IntAttr(0)),
              absl::StatusCode::kInvalidArgument, "element type int32");
  ExpectError(OpCase("Concat", 13).In(Make<float>({1}, {1})).Attr("axis", IntAttr(1)),
              absl::StatusCode::kInvalidArgument, "axis 1 is out of range");
  ExpectError(OpCase("Concat", 13).In(Make<float>({1}, {1})), absl::StatusCode::kInvalidArgument,
              "'axis' is required");
}

TEST(SliceTest, SpecExample1) {
  ExpectTensor<int32_t>(RunOk(OpCase("Slice", 13)
                                  .In(Slice2x4())
                                  .In(I64({1, 0}))
                                  .In(I64({2, 3}))
                                  .In(I64({0, 1}))
                                  .In(I64({1, 2}))),
                        {1, 2}, {5, 7});
}

TEST(SliceTest, SpecExample2) {
  ExpectTensor<int32_t>(
      RunOk(OpCase("Slice", 13).In(Slice2x4()).In(I64({0, 1})).In(I64({-1, 1000}))), {1, 3},
      {2, 3, 4});
}

TEST(SliceTest, NegativeStepsAndClamping) {
  // Reverse the last axis: start -1, end INT64_MIN, step -1.
  ExpectTensor<int32_t>(RunOk(OpCase("Slice", 13)
                                  .In(Slice2x4())
                                  .In(I64({-1}))
                                  .In(I64({kMin}))
                                  .In(I64({-1}))
                                  .In(I64({-1}))),
                        {2, 4}, {4, 3, 2, 1, 8, 7, 6, 5});
  // Step -2 from index 3 (clamped from 100) down to but excluding index 0.
  ExpectTensor<int32_t>(RunOk(OpCase("Slice", 13)
                                  .In(Slice2x4())
                                  .In(I64({100}))
                                  .In(I64({0}))
                                  .In(I64({1}))
                                  .In(I64({-2}))),
                        {2, 2}, {4, 2, 8, 6});
  // INT64_MAX end forwards; int32 starts/ends.
  ExpectTensor<int32_t>(RunOk(OpCase("Slice", 13)
                                  .In(Slice2x4())
                                  .In(Make<int32_t>({1}, {2}))
                                  .In(Make<int32_t>({1}, {std::numeric_limits<int32_t>::max()}))
                                  .In(Make<int32_t>({1}, {1}))),
                        {2, 2}, {3, 4, 7, 8});
  Tensor y = RunOk(
      OpCase("Slice", 13).In(Slice2x4()).In(I64({1})).In(I64({kMax})).In(I64({1})).In(I64({kMax})));
  ExpectTensor<int32_t>(y, {2, 1}, {2, 6});
}

TEST(SliceTest, EmptyResults) {
  // start >= end with a positive step: empty (test_slice_start_out_of_bounds).
  Tensor y = RunOk(OpCase("Slice", 13).In(Slice2x4()).In(I64({1000})).In(I64({1000})).In(I64({1})));
  EXPECT_EQ(y.shape(), (Shape{2, 0}));
  y = RunOk(OpCase("Slice", 13)
                .In(Tensor(DataType::kBool, Shape{0, 3}))
                .In(I64({0}))
                .In(I64({-1}))
                .In(I64({1}))
                .In(I64({1})));
  EXPECT_EQ(y.shape(), (Shape{0, 2}));
  y = RunOk(OpCase("Slice", 13)
                .In(Tensor(DataType::kFloat32, Shape{0}))
                .In(I64({-1}))
                .In(I64({kMin}))
                .Omitted()
                .In(I64({-1})));
  EXPECT_EQ(y.shape(), (Shape{0}));
}

TEST(SliceTest, Opset1Attributes) {
  ExpectTensor<int32_t>(RunOk(OpCase("Slice", 1)
                                  .In(Slice2x4())
                                  .Attr("starts", IntsAttr({1, 0}))
                                  .Attr("ends", IntsAttr({2, 3}))
                                  .Attr("axes", IntsAttr({0, 1}))),
                        {1, 3}, {5, 6, 7});
  ExpectTensor<int32_t>(RunOk(OpCase("Slice", 9)
                                  .In(Slice2x4())
                                  .Attr("starts", IntsAttr({0, 1}))
                                  .Attr("ends", IntsAttr({-1, 1000}))),
                        {1, 3}, {2, 3, 4});
}

TEST(SliceTest, Errors) {
  ExpectError(
      OpCase("Slice", 13).In(Slice2x4()).In(I64({0})).In(I64({1})).In(I64({0})).In(I64({0})),
      absl::StatusCode::kInvalidArgument, "steps must not be 0");
  ExpectError(OpCase("Slice", 13).In(Slice2x4()).In(I64({0, 0})).In(I64({1})),
              absl::StatusCode::kInvalidArgument, "same length");
  ExpectError(OpCase("Slice", 13).In(Slice2x4()).In(I64({0})).In(I64({1})).In(I64({2})),
              absl::StatusCode::kInvalidArgument, "axis 2 is out of range");
  ExpectError(OpCase("Slice", 13).In(Slice2x4()).In(I64({0, 0})).In(I64({1, 1})).In(I64({1, -1})),
              absl::StatusCode::kInvalidArgument, "repeated");
  ExpectError(OpCase("Slice", 13).In(Slice2x4()).In(Make<float>({1}, {0})).In(I64({1})),
              absl::StatusCode::kInvalidArgument, "int32 or int64");
}

TEST(GatherTest, Axis0And1) {
  // test_gather_0-like by hand: data [3,2], indices [[0,1],[1,2]] on axis 0.
  Tensor data = Make<float>({3, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f});
  ExpectTensor<float>(
      RunOk(OpCase("Gather", 13).In(std::move(data)).In(Make<int64_t>({2, 2}, {0, 1, 1, 2}))),
      {2, 2, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f});
  // The spec's axis=1 example: data [3,3], indices [[0,2]].
  ExpectTensor<float>(
      RunOk(OpCase("Gather", 13)
                .In(Make<float>({3, 3}, {1.0f, 1.2f, 1.9f, 2.3f, 3.4f, 3.9f, 4.5f, 5.7f, 5.9f}))
                .In(Make<int32_t>({1, 2}, {0, 2}))
                .Attr("axis", IntAttr(1))),
      {3, 1, 2}, {1.0f, 1.9f, 2.3f, 3.9f, 4.5f, 5.9f});
}

TEST(GatherTest, NegativeIndicesScalarIndexBool) {
  // test_gather_negative_indices: data arange(10), indices [0,-9,-10] -> [0,1,0].
  ExpectTensor<int64_t>(RunOk(OpCase("Gather", 13)
                                  .In(Make<int64_t>({10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}))
                                  .In(I64({0, -9, -10}))),
                        {3}, {0, 1, 0});
  ExpectTensor<bool>(RunOk(OpCase("Gather", 11)
                               .In(Make<bool>({2, 2}, {true, false, false, false}))
                               .In(Scalar<int64_t>(-1))
                               .Attr("axis", IntAttr(-1))),
                     {2}, {false, false});
  ExpectTensor<int64_t>(
      RunOk(OpCase("Gather", 13).In(Make<int64_t>({2}, {4, 5})).In(Tensor(DataType::kInt64, {0}))),
      {0}, {});
}

TEST(GatherTest, Errors) {
  ExpectError(OpCase("Gather", 13).In(Make<int64_t>({5}, {1, 2, 3, 4, 5})).In(I64({7})),
              absl::StatusCode::kInvalidArgument, "index 7 is out of range for axis 0 of size 5");
  ExpectError(OpCase("Gather", 13).In(Make<int64_t>({5}, {1, 2, 3, 4, 5})).In(I64({-6})),
              absl::StatusCode::kInvalidArgument, "index -6 is out of range");
  ExpectError(OpCase("Gather", 13).In(Make<int64_t>({2}, {1, 2})).In(Make<float>({1}, {0})),
              absl::StatusCode::kInvalidArgument, "indices must be int32 or int64, got float32");
  ExpectError(
      OpCase("Gather", 13).In(Make<int64_t>({2}, {1, 2})).In(I64({0})).Attr("axis", IntAttr(1)),
      absl::StatusCode::kInvalidArgument, "axis 1 is out of range for rank 1");
  ExpectError(OpCase("Gather", 13).In(Make<int64_t>({2}, {1, 2})),
              absl::StatusCode::kInvalidArgument, "expects 2 inputs, got 1");
}

TEST(TransposeTest, DefaultAndPerm) {
  Tensor x = Make<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  ExpectTensor<int64_t>(RunOk(OpCase("Transpose", 13).In(std::move(x))), {3, 2},
                        {1, 4, 2, 5, 3, 6});
  // [2,2,2] with perm [1,2,0]: y[i,j,k] = x[k,i,j].
  Tensor z = Make<int32_t>({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  ExpectTensor<int32_t>(
      RunOk(OpCase("Transpose", 13).In(std::move(z)).Attr("perm", IntsAttr({1, 2, 0}))), {2, 2, 2},
      {0, 4, 1, 5, 2, 6, 3, 7});
  ExpectTensor<bool>(RunOk(OpCase("Transpose", 1).In(Make<bool>({1, 2}, {true, false}))), {2, 1},
                     {true, false});
  ExpectError(OpCase("Transpose", 13).In(Make<int32_t>({1, 1}, {0})).Attr("perm", IntsAttr({0, 0})),
              absl::StatusCode::kInvalidArgument, "repeated");
  ExpectError(OpCase("Transpose", 13).In(Make<int32_t>({1, 1}, {0})).Attr("perm", IntsAttr({0})),
              absl::StatusCode::kInvalidArgument, "rank");
}

TEST(ExpandTest, SpecExamples) {
  // test_expand_dim_changed: [3,1] to [2,1,6].
  Tensor y = RunOk(OpCase("Expand", 13).In(Make<float>({3, 1}, {1, 2, 3})).In(I64({2, 1, 6})));
  ASSERT_EQ(y.shape(), (Shape{2, 3, 6}));
  EXPECT_EQ(y.data<float>()[0], 1.0f);
  EXPECT_EQ(y.data<float>()[6], 2.0f);
  EXPECT_EQ(y.data<float>()[35], 3.0f);
  // test_expand_dim_unchanged: [3,1] to [3,4].
  ExpectTensor<int64_t>(
      RunOk(OpCase("Expand", 8).In(Make<int64_t>({3, 1}, {1, 2, 3})).In(I64({3, 4}))), {3, 4},
      {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  // Shape smaller than the input: bidirectional.
  ExpectTensor<bool>(RunOk(OpCase("Expand", 13).In(Make<bool>({2}, {true, false})).In(I64({1}))),
                     {2}, {true, false});
  EXPECT_EQ(RunOk(OpCase("Expand", 13).In(Scalar<float>(1)).In(I64({0, 3}))).shape(),
            (Shape{0, 3}));
}

TEST(ExpandTest, Errors) {
  ExpectError(OpCase("Expand", 13).In(Make<float>({3}, {1, 2, 3})).In(I64({2})),
              absl::StatusCode::kInvalidArgument, "cannot be broadcast");
  ExpectError(OpCase("Expand", 13).In(Make<float>({1}, {1})).In(I64({-1})),
              absl::StatusCode::kInvalidArgument, "negative dimension");
  ExpectError(
      OpCase("Expand", 13).In(Make<float>({1}, {1})).In(I64({int64_t{1} << 30, int64_t{1} << 30})),
      absl::StatusCode::kInvalidArgument, "2^40");
}

TEST(TileTest, Repeats) {
  // [[0,1],[2,3]] tiled [2,2] (test_tile_precomputed).
  ExpectTensor<float>(
      RunOk(OpCase("Tile", 13).In(Make<float>({2, 2}, {0, 1, 2, 3})).In(I64({2, 2}))), {4, 4},
      {0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3});
  ExpectTensor<bool>(RunOk(OpCase("Tile", 6).In(Make<bool>({1, 2}, {true, false})).In(I64({2, 1}))),
                     {2, 2}, {true, false, true, false});
  EXPECT_EQ(RunOk(OpCase("Tile", 13).In(Make<int64_t>({2}, {1, 2})).In(I64({0}))).shape(),
            (Shape{0}));
}

TEST(TileTest, Opset1TilesAndAxis) {
  ExpectTensor<int64_t>(RunOk(OpCase("Tile", 1)
                                  .In(Make<int64_t>({2, 1}, {1, 2}))
                                  .In(Scalar<int64_t>(3))
                                  .In(Scalar<int64_t>(1))),
                        {2, 3}, {1, 1, 1, 2, 2, 2});
}

TEST(TileTest, Errors) {
  ExpectError(OpCase("Tile", 13).In(Make<int64_t>({2}, {1, 2})).In(I64({2, 2})),
              absl::StatusCode::kInvalidArgument, "rank 1");
  ExpectError(OpCase("Tile", 13).In(Make<int64_t>({2}, {1, 2})).In(I64({-1})),
              absl::StatusCode::kInvalidArgument, "negative");
  ExpectError(OpCase("Tile", 13).In(Make<int64_t>({2}, {1, 2})).In(I64({int64_t{1} << 62})),
              absl::StatusCode::kInvalidArgument, "2^40");
}

}  // namespace
}  // namespace loopserve::engine::native_test
