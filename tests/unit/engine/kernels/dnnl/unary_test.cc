// Relu, Tanh, Sigmoid, Exp, Log, Sqrt, Abs, Neg against the reference and the spec.

#include <cmath>
#include <random>

#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/dnnl/test_util.h"

namespace loopserve::engine::testing {
namespace {

using reference::UnaryOp;

struct OpCase {
  const char* name;
  UnaryOp op;
  bool integers;  // defined for integer types too
};
constexpr OpCase kOps[] = {{"Relu", UnaryOp::kRelu, true},        {"Tanh", UnaryOp::kTanh, false},
                           {"Sigmoid", UnaryOp::kSigmoid, false}, {"Exp", UnaryOp::kExp, false},
                           {"Log", UnaryOp::kLog, false},         {"Sqrt", UnaryOp::kSqrt, false},
                           {"Abs", UnaryOp::kAbs, true},          {"Neg", UnaryOp::kNeg, true}};

class UnaryTest : public ::testing::TestWithParam<DataType> {};

TEST_P(UnaryTest, RandomShapesMatchReference) {
  const DataType type = GetParam();
  std::mt19937 rng(7);
  for (const OpCase& op : kOps) {
    if (!op.integers && IsInteger(type)) continue;
    const Range range =
        op.op == UnaryOp::kLog || op.op == UnaryOp::kSqrt ? Range::kPositive : Range::kSigned;
    for (int trial = 0; trial < 12; ++trial) {
      const Shape shape = trial == 0 ? Shape{} : RandomShape(rng, 0, 4, 7);
      SCOPED_TRACE(::testing::Message() << op.name << " " << shape.ToString());
      const Tensor x = RandomTensor(type, shape, rng, range);
      absl::StatusOr<Tensor> actual = RunOnce(op.name, 14, {&x});
      ASSERT_TRUE(actual.ok()) << actual.status();
      Tensor expected;
      ASSERT_TRUE(reference::Unary(op.op, x, expected).ok());
      // oneDNN's vectorised transcendentals are accurate to a few ulp of the input's scale
      // (log near 1 is off by ~1e-6 absolute).
      EXPECT_TRUE(TensorsNear(*actual, expected, 1e-5, 1e-5));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, UnaryTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                                           DataType::kInt64, DataType::kInt8),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(UnarySpecTest, ValuesByHand) {
  const Tensor x = MakeTensor<float>({4}, {-2, -0.5f, 0, 1});
  const std::vector<std::pair<const char*, std::vector<float>>> cases = {
      {"Relu", {0, 0, 0, 1}},
      {"Abs", {2, 0.5f, 0, 1}},
      {"Neg", {2, 0.5f, 0, -1}},
      {"Tanh", {-0.96402758f, -0.46211716f, 0, 0.76159416f}},
      {"Sigmoid", {0.11920292f, 0.37754067f, 0.5f, 0.73105858f}},
      {"Exp", {0.13533528f, 0.60653066f, 1, 2.71828183f}},
  };
  for (const auto& [op, values] : cases) {
    SCOPED_TRACE(op);
    absl::StatusOr<Tensor> y = RunOnce(op, 13, {&x});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsNear(*y, MakeTensor<float>({4}, values), 1e-5, 1e-6));
  }
  const Tensor p = MakeTensor<float>({3}, {1, 4, 0.25f});
  absl::StatusOr<Tensor> sqrt = RunOnce("Sqrt", 13, {&p});
  ASSERT_TRUE(sqrt.ok());
  EXPECT_TRUE(TensorsNear(*sqrt, MakeTensor<float>({3}, {1, 2, 0.5f})));
  absl::StatusOr<Tensor> log = RunOnce("Log", 13, {&p});
  ASSERT_TRUE(log.ok());
  EXPECT_TRUE(
      TensorsNear(*log, MakeTensor<float>({3}, {0, 1.38629436f, -1.38629436f}), 1e-5, 1e-5));
}

TEST(UnarySpecTest, IntegerOps) {
  const Tensor x = MakeTensor<int64_t>({3}, {-3, 0, INT64_MIN});
  absl::StatusOr<Tensor> relu = RunOnce("Relu", 14, {&x});
  ASSERT_TRUE(relu.ok()) << relu.status();
  EXPECT_TRUE(TensorsNear(*relu, MakeTensor<int64_t>({3}, {0, 0, 0})));
  absl::StatusOr<Tensor> neg = RunOnce("Neg", 13, {&x});
  ASSERT_TRUE(neg.ok()) << neg.status();
  EXPECT_TRUE(TensorsNear(*neg, MakeTensor<int64_t>({3}, {3, 0, INT64_MIN})));
}

TEST(UnarySpecTest, FloatOnlyOpsRejectIntegers) {
  const Tensor x = MakeTensor<int64_t>({1}, {1});
  absl::StatusOr<Tensor> tanh = RunOnce("Tanh", 13, {&x});
  EXPECT_EQ(tanh.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tanh.status().message().find("int64"), absl::string_view::npos) << tanh.status();
  const Tensor u = MakeTensor<uint8_t>({1}, {1});
  EXPECT_FALSE(RunOnce("Neg", 13, {&u}).ok());
}

}  // namespace
}  // namespace loopserve::engine::testing
