// Add/Sub/Mul/Div: the oneDNN kernels against the reference, and the reference against the spec.

#include <cstdint>
#include <random>

#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/dnnl/test_util.h"

namespace loopserve::engine::testing {
namespace {

using reference::BinaryOp;

struct OpCase {
  const char* name;
  BinaryOp op;
};
constexpr OpCase kOps[] = {{"Add", BinaryOp::kAdd},
                           {"Sub", BinaryOp::kSub},
                           {"Mul", BinaryOp::kMul},
                           {"Div", BinaryOp::kDiv}};

// Runs op on a and b through the kernel and the reference and compares.
void ExpectMatchesReference(const OpCase& op, const Tensor& a, const Tensor& b) {
  SCOPED_TRACE(::testing::Message() << op.name << " " << a.shape().ToString() << " "
                                    << b.shape().ToString() << " " << DataTypeName(a.dtype()));
  absl::StatusOr<Tensor> actual = RunOnce(op.name, 14, {&a, &b});
  ASSERT_TRUE(actual.ok()) << actual.status();
  Tensor expected;
  ASSERT_TRUE(reference::Binary(op.op, a, b, expected).ok());
  EXPECT_TRUE(TensorsNear(*actual, expected));
}

class BinaryTest : public ::testing::TestWithParam<DataType> {};

TEST_P(BinaryTest, RandomBroadcastShapesMatchReference) {
  std::mt19937 rng(1234);
  for (const OpCase& op : kOps) {
    for (int trial = 0; trial < 40; ++trial) {
      const Shape out = RandomShape(rng, 0, 5, 5);
      Shape a_shape = RandomBroadcastable(out, rng);
      Shape b_shape = RandomBroadcastable(out, rng);
      if (trial % 2) std::swap(a_shape, b_shape);
      if (trial % 5 == 0) a_shape = out;
      const Tensor a = RandomTensor(GetParam(), a_shape, rng);
      const Tensor b = RandomTensor(GetParam(), b_shape, rng,
                                    op.op == BinaryOp::kDiv ? Range::kNonZero : Range::kSigned);
      ExpectMatchesReference(op, a, b);
    }
  }
}

TEST_P(BinaryTest, BroadcastCornerCases) {
  std::mt19937 rng(99);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {std::vector<int64_t>{3, 1}, std::vector<int64_t>{1, 4}},  // both sides broadcast
      {std::vector<int64_t>{4},
       std::vector<int64_t>{3, 4}},  // a smaller: swapped (Sub negated, Div expanded)
      {std::vector<int64_t>{3, 4}, std::vector<int64_t>{4}},  // b smaller: oneDNN's own broadcast
      {std::vector<int64_t>{}, std::vector<int64_t>{2, 3}},   // scalar a
      {std::vector<int64_t>{2, 3}, std::vector<int64_t>{}},   // scalar b
      {std::vector<int64_t>{}, std::vector<int64_t>{}},       // scalar result
      {std::vector<int64_t>{1}, std::vector<int64_t>{}},      // [1] and scalar
      {std::vector<int64_t>{2, 0, 3}, std::vector<int64_t>{3}},        // empty
      {std::vector<int64_t>{0}, std::vector<int64_t>{}},               // empty and scalar
      {std::vector<int64_t>{5, 1, 0}, std::vector<int64_t>{1, 4, 1}},  // empty from both
      {std::vector<int64_t>{2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1,
                            2},  // rank 13, alternating broadcast
       std::vector<int64_t>{1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1}},
      {std::vector<int64_t>{1, 1, 1, 3, 1, 1, 1, 1},
       std::vector<int64_t>{2, 1, 1, 1, 1, 1, 1, 5}},  // rank 8
  };
  for (const OpCase& op : kOps) {
    for (const auto& [a_dims, b_dims] : cases) {
      const Shape a_shape(a_dims), b_shape(b_dims);
      const Tensor a = RandomTensor(GetParam(), a_shape, rng);
      const Tensor b = RandomTensor(GetParam(), b_shape, rng,
                                    op.op == BinaryOp::kDiv ? Range::kNonZero : Range::kSigned);
      ExpectMatchesReference(op, a, b);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BinaryTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                                           DataType::kInt64, DataType::kInt8, DataType::kUint8),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(BinarySpecTest, FloatValuesByHand) {
  const Tensor a = MakeTensor<float>({2, 2}, {1, 2, 3, 4});
  const Tensor b = MakeTensor<float>({2}, {10, 20});
  absl::StatusOr<Tensor> add = RunOnce("Add", 14, {&a, &b});
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_TRUE(TensorsNear(*add, MakeTensor<float>({2, 2}, {11, 22, 13, 24})));
  absl::StatusOr<Tensor> sub = RunOnce("Sub", 14, {&b, &a});  // b broadcast as src0
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_TRUE(TensorsNear(*sub, MakeTensor<float>({2, 2}, {9, 18, 7, 16})));
  absl::StatusOr<Tensor> div = RunOnce("Div", 14, {&b, &a});
  ASSERT_TRUE(div.ok()) << div.status();
  EXPECT_TRUE(TensorsNear(*div, MakeTensor<float>({2, 2}, {10, 10, 10.0f / 3, 5})));
  const Tensor col = MakeTensor<float>({2, 1}, {1, 2});
  const Tensor row = MakeTensor<float>({1, 3}, {10, 20, 30});
  absl::StatusOr<Tensor> mul = RunOnce("Mul", 14, {&col, &row});
  ASSERT_TRUE(mul.ok()) << mul.status();
  EXPECT_TRUE(TensorsNear(*mul, MakeTensor<float>({2, 3}, {10, 20, 30, 20, 40, 60})));
}

TEST(BinarySpecTest, IntegerDivisionTruncates) {
  const Tensor a = MakeTensor<int32_t>({4}, {7, -7, 7, -7});
  const Tensor b = MakeTensor<int32_t>({4}, {2, 2, -2, -2});
  absl::StatusOr<Tensor> div = RunOnce("Div", 14, {&a, &b});
  ASSERT_TRUE(div.ok()) << div.status();
  EXPECT_TRUE(TensorsNear(*div, MakeTensor<int32_t>({4}, {3, -3, -3, 3})));

  const Tensor min = MakeTensor<int32_t>({1}, {INT32_MIN});
  const Tensor minus_one = MakeTensor<int32_t>({1}, {-1});
  absl::StatusOr<Tensor> wrapped = RunOnce("Div", 14, {&min, &minus_one});
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_EQ(wrapped->data<int32_t>()[0], INT32_MIN);
}

TEST(BinarySpecTest, IntegerDivisionByZeroIsAnError) {
  const Tensor a = MakeTensor<int64_t>({2}, {1, 2});
  const Tensor b = MakeTensor<int64_t>({2}, {1, 0});
  absl::StatusOr<Tensor> div = RunOnce("Div", 14, {&a, &b});
  EXPECT_EQ(div.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(div.status().message().find("division by zero"), absl::string_view::npos);
}

TEST(BinarySpecTest, Int64AddWrapsAndBroadcasts) {
  const Tensor a = MakeTensor<int64_t>({2, 1}, {INT64_MAX, 5});
  const Tensor b = MakeTensor<int64_t>({2}, {1, 10000000000});
  absl::StatusOr<Tensor> add = RunOnce("Add", 14, {&a, &b});
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_TRUE(TensorsNear(
      *add, MakeTensor<int64_t>({2, 2}, {INT64_MIN, INT64_MIN + 9999999999, 6, 10000000005})));
}

TEST(BinarySpecTest, MismatchedTypesAreRejected) {
  const Tensor a = MakeTensor<float>({2}, {1, 2});
  const Tensor b = MakeTensor<int64_t>({2}, {1, 2});
  absl::StatusOr<Tensor> add = RunOnce("Add", 14, {&a, &b});
  EXPECT_EQ(add.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(add.status().message().find("float32 and int64"), absl::string_view::npos)
      << add.status();
}

TEST(BinarySpecTest, IncompatibleShapesAreRejected) {
  const Tensor a = MakeTensor<float>({2}, {1, 2});
  const Tensor b = MakeTensor<float>({3}, {1, 2, 3});
  absl::StatusOr<Tensor> add = RunOnce("Add", 14, {&a, &b});
  EXPECT_EQ(add.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(add.status().message().find("[2] and [3]"), absl::string_view::npos) << add.status();
}

TEST(BinarySpecTest, LegacyBroadcastWithAxis) {
  // Opset 6: B [3] aligned at axis 1 of A [2,3,2].
  const Tensor a = MakeTensor<float>({2, 3, 2}, {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1});
  const Tensor b = MakeTensor<float>({3}, {10, 20, 30});
  absl::StatusOr<Tensor> add =
      RunOnce("Add", 6, {&a, &b}, {{"broadcast", IntAttr(1)}, {"axis", IntAttr(1)}});
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_TRUE(TensorsNear(
      *add, MakeTensor<float>({2, 3, 2}, {10, 10, 20, 20, 30, 30, 11, 11, 21, 21, 31, 31})));
  const Tensor ai = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  const Tensor bi = MakeTensor<int64_t>({2}, {10, 20});
  absl::StatusOr<Tensor> sub =
      RunOnce("Sub", 6, {&ai, &bi}, {{"broadcast", IntAttr(1)}, {"axis", IntAttr(0)}});
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_TRUE(TensorsNear(*sub, MakeTensor<int64_t>({2, 2}, {-9, -8, -17, -16})));
  // Without broadcast=1 the shapes must match.
  absl::StatusOr<Tensor> strict = RunOnce("Add", 6, {&a, &b});
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(strict.status().message().find("broadcast=1"), absl::string_view::npos)
      << strict.status();
  // Legacy broadcasting is one-directional: A may not grow.
  absl::StatusOr<Tensor> grow = RunOnce("Add", 6, {&b, &a}, {{"broadcast", IntAttr(1)}});
  EXPECT_EQ(grow.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loopserve::engine::testing
