// Split, TopK, CumSum, Hardmax, Trilu, Det, Pad, Einsum, NonMaxSuppression and the Reduce ops
// added with them (L1, L2, LogSum, LogSumExp, SumSquare).

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

TEST(SplitTest, EqualGivenAndUneven) {
  absl::StatusOr<std::vector<Value>> out =
      RunOp(OpCase("Split", 13).In(Make<float>({6}, {1, 2, 3, 4, 5, 6})).Outputs(3));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<float>((*out)[2].tensor(), {2}, {5, 6});
  out = RunOp(
      OpCase("Split", 13).In(Make<float>({6}, {1, 2, 3, 4, 5, 6})).In(I64({2, 4})).Outputs(2));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<float>((*out)[1].tensor(), {4}, {3, 4, 5, 6});
  out = RunOp(OpCase("Split", 11)
                  .In(Make<float>({2, 2}, {1, 2, 3, 4}))
                  .Attr("axis", IntAttr(1))
                  .Attr("split", IntsAttr({1, 1}))
                  .Outputs(2));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<float>((*out)[1].tensor(), {2, 1}, {2, 4});
  out = RunOp(OpCase("Split", 18)
                  .In(Make<float>({7}, {1, 2, 3, 4, 5, 6, 7}))
                  .Attr("num_outputs", IntAttr(4))
                  .Outputs(4));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<float>((*out)[0].tensor(), {2}, {1, 2});
  ExpectTensor<float>((*out)[3].tensor(), {1}, {7});
  ExpectError(OpCase("Split", 13).In(Make<float>({5}, {1, 2, 3, 4, 5})).Outputs(2),
              absl::StatusCode::kInvalidArgument, "evenly");
  ExpectError(OpCase("Split", 13).In(Make<float>({5}, {1, 2, 3, 4, 5})).In(I64({1, 1})).Outputs(2),
              absl::StatusCode::kInvalidArgument, "sum to 2");
  // Lengths whose int64 sum wraps around to the axis size (4 * 2^62 + 5 = 5 mod 2^64).
  constexpr int64_t kHuge = int64_t{1} << 62;
  ExpectError(OpCase("Split", 13)
                  .In(Make<float>({5}, {1, 2, 3, 4, 5}))
                  .In(I64({kHuge, kHuge, kHuge, kHuge + 5}))
                  .Outputs(4),
              absl::StatusCode::kInvalidArgument, "exceeds axis 0 of size 5");
}

TEST(TopKTest, LargestSmallestAndTies) {
  auto x = [] { return Make<float>({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}); };
  absl::StatusOr<std::vector<Value>> out =
      RunOp(OpCase("TopK", 11).In(x()).In(I64({3})).Outputs(2));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<float>((*out)[0].tensor(), {3, 3}, {3, 2, 1, 7, 6, 5, 11, 10, 9});
  ExpectTensor<int64_t>((*out)[1].tensor(), {3, 3}, {3, 2, 1, 3, 2, 1, 3, 2, 1});
  out = RunOp(OpCase("TopK", 11)
                  .In(x())
                  .In(I64({2}))
                  .Attr("largest", IntAttr(0))
                  .Attr("axis", IntAttr(0))
                  .Outputs(2));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<float>((*out)[0].tensor(), {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  out = RunOp(
      OpCase("TopK", 1).In(Make<int32_t>({4}, {5, 7, 5, 7})).Attr("k", IntAttr(3)).Outputs(2));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<int64_t>((*out)[1].tensor(), {3}, {1, 3, 0});
  ExpectError(OpCase("TopK", 11).In(x()).In(I64({5})).Outputs(2),
              absl::StatusCode::kInvalidArgument, "out of range");
}

TEST(TopKTest, LongRowsMatchAStableSortOfTheRow) {
  // Rows much longer than K (the one-pass threshold scan), with many ties (values drawn from 40
  // levels), largest and smallest, and a row holding a NaN (sorted the general way): each row's
  // expected values and indices are the first K of the row's indices stably sorted by value.
  std::mt19937 rng(5);
  constexpr int64_t kRows = 3, kN = 1000;
  for (int largest : {1, 0}) {
    for (int64_t k : {1, 7, 16, 100}) {
      std::vector<float> data(kRows * kN);
      for (float& v : data) v = static_cast<float>(static_cast<int>(rng() % 40) - 20) * 0.5f;
      data[2 * kN + 321] = std::nanf("");  // the last row runs the general sort
      Tensor x(DataType::kFloat32, Shape{kRows, kN});
      std::copy(data.begin(), data.end(), x.mutable_data<float>());
      absl::StatusOr<std::vector<Value>> out = RunOp(OpCase("TopK", 11)
                                                         .In(std::move(x))
                                                         .In(I64({k}))
                                                         .Attr("largest", IntAttr(largest))
                                                         .Outputs(2));
      ASSERT_TRUE(out.ok()) << out.status();
      const Tensor& values = (*out)[0].tensor();
      const Tensor& indices = (*out)[1].tensor();
      ASSERT_EQ(values.shape(), (Shape{kRows, k}));
      for (int64_t r = 0; r < 2; ++r) {  // the rows without a NaN
        std::vector<int64_t> order(kN);
        for (int64_t j = 0; j < kN; ++j) order[j] = j;
        const float* row = data.data() + r * kN;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return largest ? row[a] > row[b] : row[a] < row[b];
        });
        for (int64_t e = 0; e < k; ++e) {
          EXPECT_EQ(indices.data<int64_t>()[r * k + e], order[e])
              << "row " << r << " k " << k << " largest " << largest << " rank " << e;
          EXPECT_EQ(values.data<float>()[r * k + e], row[order[e]]);
        }
      }
    }
  }
}

TEST(CumSumTest, SpecExamples) {
  auto x = [] { return Make<double>({5}, {1, 2, 3, 4, 5}); };
  ExpectTensor<double>(RunOk(OpCase("CumSum", 14).In(x()).In(Scalar<int32_t>(0))), {5},
                       {1, 3, 6, 10, 15});
  ExpectTensor<double>(
      RunOk(OpCase("CumSum", 14).In(x()).In(Scalar<int32_t>(0)).Attr("exclusive", IntAttr(1))), {5},
      {0, 1, 3, 6, 10});
  ExpectTensor<double>(
      RunOk(OpCase("CumSum", 14).In(x()).In(Scalar<int64_t>(0)).Attr("reverse", IntAttr(1))), {5},
      {15, 14, 12, 9, 5});
  ExpectTensor<int32_t>(RunOk(OpCase("CumSum", 14)
                                  .In(Make<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                  .In(Scalar<int64_t>(1))),
                        {2, 3}, {1, 3, 6, 4, 9, 15});
}

TEST(HardmaxTest, AxisAndLegacyCoercion) {
  ExpectTensor<float>(
      RunOk(OpCase("Hardmax", 13).In(Make<float>({2, 4}, {3, 0, 1, 2, 2, 5, 5, 0}))), {2, 4},
      {1, 0, 0, 0, 0, 1, 0, 0});
  // Opset 11, axis 0: the whole tensor is one row.
  ExpectTensor<float>(
      RunOk(OpCase("Hardmax", 11).In(Make<float>({2, 2}, {1, 2, 4, 3})).Attr("axis", IntAttr(0))),
      {2, 2}, {0, 0, 1, 0});
}

TEST(TriluTest, SpecStyleExamples) {
  auto x = [] { return Make<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6}); };
  ExpectTensor<int64_t>(RunOk(OpCase("Trilu", 14).In(x())), {2, 3}, {1, 2, 3, 0, 5, 6});
  ExpectTensor<int64_t>(RunOk(OpCase("Trilu", 14).In(x()).Attr("upper", IntAttr(0))), {2, 3},
                        {1, 0, 0, 4, 5, 0});
  ExpectTensor<int64_t>(RunOk(OpCase("Trilu", 14).In(x()).In(Scalar<int64_t>(1))), {2, 3},
                        {0, 2, 3, 0, 0, 6});
  ExpectTensor<int64_t>(
      RunOk(OpCase("Trilu", 14).In(x()).In(Scalar<int64_t>(-1)).Attr("upper", IntAttr(0))), {2, 3},
      {0, 0, 0, 4, 0, 0});
  ExpectError(OpCase("Trilu", 14).In(Make<int64_t>({2}, {1, 2})),
              absl::StatusCode::kInvalidArgument, "rank >= 2");
}

TEST(DetTest, TwoByTwoAndBatch) {
  ExpectTensor<float>(RunOk(OpCase("Det", 11).In(Make<float>({2, 2}, {1, 2, 3, 4}))), {}, {-2});
  ExpectTensor<double>(
      RunOk(OpCase("Det", 11).In(Make<double>({2, 2, 2}, {2, 0, 0, 3, 1, 2, 2, 4}))), {2}, {6, 0});
}

TEST(PadTest, Modes) {
  auto x = [] { return Make<float>({3, 2}, {1, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f}); };
  ExpectTensor<float>(RunOk(OpCase("Pad", 13).In(x()).In(I64({0, 2, 0, 0}))), {3, 4},
                      {0, 0, 1, 1.2f, 0, 0, 2.3f, 3.4f, 0, 0, 4.5f, 5.7f});
  ExpectTensor<float>(
      RunOk(OpCase("Pad", 13).In(x()).In(I64({0, 2, 0, 0})).Attr("mode", StringAttr("reflect"))),
      {3, 4}, {1, 1.2f, 1, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f, 4.5f, 5.7f});
  ExpectTensor<float>(
      RunOk(OpCase("Pad", 13).In(x()).In(I64({0, 2, 0, 0})).Attr("mode", StringAttr("edge"))),
      {3, 4}, {1, 1, 1, 1.2f, 2.3f, 2.3f, 2.3f, 3.4f, 4.5f, 4.5f, 4.5f, 5.7f});
  ExpectTensor<int32_t>(RunOk(OpCase("Pad", 13)
                                  .In(Make<int32_t>({3}, {1, 2, 3}))
                                  .In(I64({-1, 1}))
                                  .In(Scalar<int32_t>(9))),
                        {3}, {2, 3, 9});
  ExpectTensor<float>(RunOk(OpCase("Pad", 2)
                                .In(Make<float>({2}, {1, 2}))
                                .Attr("pads", IntsAttr({1, 0}))
                                .Attr("value", FloatAttr(7))),
                      {3}, {7, 1, 2});
  ExpectError(OpCase("Pad", 13).In(Make<float>({2}, {1, 2})).In(I64({-3, 0})),
              absl::StatusCode::kInvalidArgument, "below zero");
}

// Pads on the last axis (the kernel copies each row's inside run and maps the pads around it),
// mixed with pads and crops on the outer axis; expected values from numpy.pad, the reference the
// ONNX spec's Pad tests use.
TEST(PadTest, LastAxisRowsAgreeWithNumpyPad) {
  auto x = [] { return Make<float>({2, 3}, {1, 2, 3, 4, 5, 6}); };
  // Reflect farther than the axis is long: the reflection repeats. (Wrap stays within one period:
  // numpy.pad wraps longer pads over its own padding.)
  ExpectTensor<float>(
      RunOk(OpCase("Pad", 13).In(x()).In(I64({0, 4, 0, 5})).Attr("mode", StringAttr("reflect"))),
      {2, 12}, {1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 4, 5, 6, 5, 4, 5, 6, 5, 4, 5, 6, 5});
  ExpectTensor<float>(
      RunOk(OpCase("Pad", 19).In(x()).In(I64({1, 2, 0, 3})).Attr("mode", StringAttr("wrap"))),
      {3, 8}, {5, 6, 4, 5, 6, 4, 5, 6, 2, 3, 1, 2, 3, 1, 2, 3, 5, 6, 4, 5, 6, 4, 5, 6});
  ExpectTensor<float>(
      RunOk(OpCase("Pad", 13).In(x()).In(I64({0, 1, 1, 2})).Attr("mode", StringAttr("edge"))),
      {3, 6}, {1, 1, 2, 3, 3, 3, 4, 4, 5, 6, 6, 6, 4, 4, 5, 6, 6, 6});
  auto y = [] { return Make<float>({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}); };
  // A constant row above, the first column cropped, two constant columns after.
  ExpectTensor<float>(RunOk(OpCase("Pad", 13).In(y()).In(I64({1, -1, 0, 2})).In(Scalar<float>(9))),
                      {3, 5}, {9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 5, 6, 7, 9, 9});
  ExpectTensor<float>(
      RunOk(OpCase("Pad", 13).In(y()).In(I64({0, 2, 0, -1})).Attr("mode", StringAttr("reflect"))),
      {2, 5}, {2, 1, 0, 1, 2, 6, 5, 4, 5, 6});
  // Cropped past the data: only the constant is left.
  ExpectTensor<float>(RunOk(OpCase("Pad", 13).In(y()).In(I64({0, -5, 0, 3})).In(Scalar<float>(9))),
                      {2, 2}, {9, 9, 9, 9});
}

TEST(EinsumTest, MatmulTransposeDiagonalAndEllipsis) {
  ExpectTensor<float>(RunOk(OpCase("Einsum", 12)
                                .In(Make<float>({2, 2}, {1, 2, 3, 4}))
                                .In(Make<float>({2, 2}, {5, 6, 7, 8}))
                                .Attr("equation", StringAttr("ij,jk->ik"))),
                      {2, 2}, {19, 22, 43, 50});
  ExpectTensor<float>(RunOk(OpCase("Einsum", 12)
                                .In(Make<float>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                .Attr("equation", StringAttr("ij->ji"))),
                      {3, 2}, {1, 4, 2, 5, 3, 6});
  ExpectTensor<float>(RunOk(OpCase("Einsum", 12)
                                .In(Make<float>({2, 2}, {1, 2, 3, 4}))
                                .Attr("equation", StringAttr("ii->i"))),
                      {2}, {1, 4});
  ExpectTensor<float>(RunOk(OpCase("Einsum", 12)
                                .In(Make<float>({2, 2}, {1, 2, 3, 4}))
                                .Attr("equation", StringAttr("ii"))),
                      {}, {5});
  // Implicit output "ik"; batch matmul through an ellipsis.
  ExpectTensor<float>(RunOk(OpCase("Einsum", 12)
                                .In(Make<float>({1, 2}, {1, 2}))
                                .In(Make<float>({2, 1}, {3, 4}))
                                .Attr("equation", StringAttr("ij,jk"))),
                      {1, 1}, {11});
  ExpectTensor<float>(RunOk(OpCase("Einsum", 12)
                                .In(Make<float>({2, 1, 2}, {1, 2, 3, 4}))
                                .In(Make<float>({2, 2, 1}, {1, 1, 2, 2}))
                                .Attr("equation", StringAttr("...ij,...jk->...ik"))),
                      {2, 1, 1}, {3, 14});
  ExpectError(OpCase("Einsum", 12)
                  .In(Make<float>({2, 2}, {1, 2, 3, 4}))
                  .In(Make<float>({3}, {1, 2, 3}))
                  .Attr("equation", StringAttr("ij,j->i")),
              absl::StatusCode::kInvalidArgument, "sizes");
}

TEST(NonMaxSuppressionTest, SuppressByIou) {
  Tensor boxes = Make<float>({1, 6, 4}, {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                         0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101});
  Tensor scores = Make<float>({1, 1, 6}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f});
  ExpectTensor<int64_t>(RunOk(OpCase("NonMaxSuppression", 11)
                                  .In(std::move(boxes))
                                  .In(std::move(scores))
                                  .In(I64({3}))
                                  .In(Make<float>({1}, {0.5f}))
                                  .In(Make<float>({1}, {0}))),
                        {3, 3}, {0, 0, 3, 0, 0, 0, 0, 0, 5});
  // Without max_output_boxes_per_class nothing is selected.
  ExpectTensor<int64_t>(RunOk(OpCase("NonMaxSuppression", 11)
                                  .In(Make<float>({1, 1, 4}, {0, 0, 1, 1}))
                                  .In(Make<float>({1, 1, 1}, {0.5f}))),
                        {0, 3}, {});
}

TEST(ReduceMoreTest, NormsAndLogs) {
  auto x = [] { return Make<float>({2, 2}, {1, -2, 3, -4}); };
  ExpectTensor<float>(
      RunOk(
          OpCase("ReduceL1", 13).In(x()).Attr("axes", IntsAttr({1})).Attr("keepdims", IntAttr(0))),
      {2}, {3, 7});
  ExpectTensor<float>(
      RunOk(OpCase("ReduceL2", 18).In(x()).In(I64({1})).Attr("keepdims", IntAttr(0))), {2},
      {std::sqrt(5.0f), 5});
  ExpectTensor<float>(RunOk(OpCase("ReduceSumSquare", 13).In(x())), {1, 1}, {30});
  ExpectTensor<float>(RunOk(OpCase("ReduceLogSumExp", 13).In(Make<float>({2}, {0, 0}))), {1},
                      {std::log(2.0f)});
  ExpectTensor<float>(RunOk(OpCase("ReduceLogSum", 13).In(Make<float>({2}, {1, 2}))), {1},
                      {std::log(3.0f)});
  ExpectTensor<int32_t>(RunOk(OpCase("ReduceL1", 13).In(Make<int32_t>({2}, {-3, 4}))), {1}, {7});
}

}  // namespace
}  // namespace loopserve::engine::native_test
