// Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Not, And, Or, Xor.

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

TEST(CompareTest, SameShapeInt64) {
  ExpectTensor<bool>(RunOk(OpCase("Less", 13).In(I64({1, 5, 3})).In(I64({2, 5, 1}))), {3},
                     {true, false, false});
  ExpectTensor<bool>(RunOk(OpCase("Greater", 13).In(I64({1, 5, 3})).In(I64({2, 5, 1}))), {3},
                     {false, false, true});
  ExpectTensor<bool>(RunOk(OpCase("Equal", 13).In(I64({1, 5, 3})).In(I64({2, 5, 1}))), {3},
                     {false, true, false});
  ExpectTensor<bool>(RunOk(OpCase("LessOrEqual", 16).In(I64({1, 5, 3})).In(I64({2, 5, 1}))), {3},
                     {true, true, false});
  ExpectTensor<bool>(RunOk(OpCase("GreaterOrEqual", 12).In(I64({1, 5, 3})).In(I64({2, 5, 1}))), {3},
                     {false, true, true});
}

TEST(CompareTest, Broadcasting) {
  // [2,1] vs [3]: y[i,j] = a[i] < b[j].
  ExpectTensor<bool>(
      RunOk(
          OpCase("Less", 13).In(Make<float>({2, 1}, {1.5f, 3.5f})).In(Make<float>({3}, {1, 2, 4}))),
      {2, 3}, {false, true, true, false, false, true});
  // Scalar against a tensor.
  ExpectTensor<bool>(
      RunOk(OpCase("Equal", 11).In(Scalar<int32_t>(2)).In(Make<int32_t>({2, 2}, {1, 2, 2, 3}))),
      {2, 2}, {false, true, true, false});
  // Empty broadcast dim.
  EXPECT_EQ(
      RunOk(OpCase("Greater", 13).In(Tensor(DataType::kInt64, {0, 1})).In(I64({1, 2}))).shape(),
      (Shape{0, 2}));
}

TEST(CompareTest, EqualOnBool) {
  ExpectTensor<bool>(
      RunOk(
          OpCase("Equal", 13).In(Make<bool>({2}, {true, false})).In(Make<bool>({2}, {true, true}))),
      {2}, {true, false});
}

TEST(CompareTest, LegacyBroadcastOpset1) {
  // B [2] aligned at axis 0 of A [2,3]: y[i,j] = A[i,j] == B[i].
  ExpectTensor<bool>(RunOk(OpCase("Equal", 1)
                               .In(Make<int32_t>({2, 3}, {1, 1, 2, 2, 5, 2}))
                               .In(Make<int32_t>({2}, {1, 2}))
                               .Attr("broadcast", IntAttr(1))
                               .Attr("axis", IntAttr(0))),
                     {2, 3}, {true, true, false, true, false, true});
  ExpectError(OpCase("Less", 1).In(Make<float>({2}, {1, 2})).In(Make<float>({1}, {1})),
              absl::StatusCode::kInvalidArgument, "broadcast is not enabled");
}

TEST(CompareTest, Errors) {
  ExpectError(OpCase("Less", 13).In(I64({1, 2})).In(I64({1, 2, 3})),
              absl::StatusCode::kInvalidArgument, "cannot be broadcast");
  ExpectError(OpCase("Less", 13).In(I64({1})).In(Make<int32_t>({1}, {1})),
              absl::StatusCode::kInvalidArgument, "input A has element type int64 but input B");
  ExpectError(OpCase("Less", 13).In(Make<bool>({1}, {true})).In(Make<bool>({1}, {true})),
              absl::StatusCode::kInvalidArgument, "bool");
  ExpectError(OpCase("Equal", 13).In(I64({1})), absl::StatusCode::kInvalidArgument,
              "expects 2 inputs");
}

TEST(LogicalTest, TruthTables) {
  Tensor a = Make<bool>({4}, {false, false, true, true});
  Tensor b = Make<bool>({4}, {false, true, false, true});
  ExpectTensor<bool>(RunOk(OpCase("And", 7)
                               .In(Make<bool>({4}, {false, false, true, true}))
                               .In(Make<bool>({4}, {false, true, false, true}))),
                     {4}, {false, false, false, true});
  ExpectTensor<bool>(RunOk(OpCase("Or", 7)
                               .In(Make<bool>({4}, {false, false, true, true}))
                               .In(Make<bool>({4}, {false, true, false, true}))),
                     {4}, {false, true, true, true});
  ExpectTensor<bool>(RunOk(OpCase("Xor", 7).In(std::move(a)).In(std::move(b))), {4},
                     {false, true, true, false});
  ExpectTensor<bool>(RunOk(OpCase("Not", 1).In(Make<bool>({2}, {true, false}))), {2},
                     {false, true});
}

TEST(LogicalTest, BroadcastAndErrors) {
  ExpectTensor<bool>(RunOk(OpCase("And", 7)
                               .In(Make<bool>({2, 2}, {true, false, true, true}))
                               .In(Make<bool>({2}, {true, false}))),
                     {2, 2}, {true, false, true, false});
  ExpectError(OpCase("And", 7).In(I64({1})).In(I64({1})), absl::StatusCode::kInvalidArgument,
              "int64");
  ExpectError(OpCase("Not", 1).In(Make<float>({1}, {1})), absl::StatusCode::kInvalidArgument,
              "float32");
}

}  // namespace
}  // namespace loopserve::engine::native_test
