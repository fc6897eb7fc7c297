// Softmax (both the opset < 13 coerce-to-2-D form and the opset >= 13 per-axis form).

#include <random>

#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/dnnl/test_util.h"

namespace loopserve::engine::testing {
namespace {

class SoftmaxTest : public ::testing::TestWithParam<DataType> {};

TEST_P(SoftmaxTest, RandomShapesAndAxesMatchReference) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const Shape shape = RandomShape(rng, 1, 4, 6);
    const int opset = trial % 2 ? 13 : 11;
    const int64_t axis = static_cast<int64_t>(rng() % (2 * shape.rank())) - shape.rank();
    const Tensor x = RandomTensor(GetParam(), shape, rng);
    SCOPED_TRACE(::testing::Message()
                 << shape.ToString() << " axis " << axis << " opset " << opset);
    absl::StatusOr<Tensor> actual = RunOnce("Softmax", opset, {&x}, {{"axis", IntAttr(axis)}});
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor expected;
    ASSERT_TRUE(reference::Softmax(x, axis, opset < 13, expected).ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-5, 1e-6));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, SoftmaxTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat64),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(SoftmaxSpecTest, ValuesByHand) {
  // softmax([1,2,3]) = exp([1,2,3]) / (e + e^2 + e^3).
  const Tensor x = MakeTensor<float>({1, 3}, {1, 2, 3});
  const Tensor expected = MakeTensor<float>({1, 3}, {0.09003057f, 0.24472847f, 0.66524096f});
  for (int opset : {1, 11, 13}) {
    absl::StatusOr<Tensor> y = RunOnce("Softmax", opset, {&x});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsNear(*y, expected, 1e-6, 1e-7));
  }
  // Opset 11, axis 0 on [2,2]: one softmax over all four elements.
  const Tensor sq = MakeTensor<float>({2, 2}, {0, 0, 0, 0});
  absl::StatusOr<Tensor> coerced = RunOnce("Softmax", 11, {&sq}, {{"axis", IntAttr(0)}});
  ASSERT_TRUE(coerced.ok()) << coerced.status();
  EXPECT_TRUE(TensorsNear(*coerced, MakeTensor<float>({2, 2}, {0.25f, 0.25f, 0.25f, 0.25f})));
  // Opset 13, axis 0 on [2,2]: per column.
  const Tensor cols = MakeTensor<float>({2, 2}, {0, 5, 0, 5});
  absl::StatusOr<Tensor> per_axis = RunOnce("Softmax", 13, {&cols}, {{"axis", IntAttr(0)}});
  ASSERT_TRUE(per_axis.ok()) << per_axis.status();
  EXPECT_TRUE(TensorsNear(*per_axis, MakeTensor<float>({2, 2}, {0.5f, 0.5f, 0.5f, 0.5f})));
  // Opset 13 default axis -1 on a 3-D input; large values must not overflow.
  const Tensor big = MakeTensor<float>({1, 1, 2}, {1000, 1000});
  absl::StatusOr<Tensor> stable = RunOnce("Softmax", 13, {&big});
  ASSERT_TRUE(stable.ok()) << stable.status();
  EXPECT_TRUE(TensorsNear(*stable, MakeTensor<float>({1, 1, 2}, {0.5f, 0.5f})));
}

TEST(SoftmaxSpecTest, EmptyAndBadAxis) {
  const Tensor empty(DataType::kFloat32, Shape{0, 3});
  absl::StatusOr<Tensor> y = RunOnce("Softmax", 13, {&empty});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{0, 3}));
  const Tensor x = MakeTensor<float>({3}, {1, 2, 3});
  absl::StatusOr<Tensor> bad = RunOnce("Softmax", 13, {&x}, {{"axis", IntAttr(1)}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  const Tensor i = MakeTensor<int32_t>({3}, {1, 2, 3});
  EXPECT_EQ(RunOnce("Softmax", 13, {&i}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loopserve::engine::testing
