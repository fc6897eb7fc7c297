// MatMul and Gemm against the reference and the spec.

#include <random>

#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/dnnl/test_util.h"

namespace loopserve::engine::testing {
namespace {

class MatMulTest : public ::testing::TestWithParam<DataType> {};

TEST_P(MatMulTest, RandomShapesMatchReference) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 80; ++trial) {
    const int64_t m = 1 + rng() % 6, k = rng() % 7 == 0 ? 0 : 1 + rng() % 9, n = 1 + rng() % 6;
    const Shape batch = RandomShape(rng, 0, 3, 3, 0.05);
    Shape::Dims a_dims, b_dims;
    // Each operand takes a broadcastable part of the batch, or is 1-D.
    const int a_kind = rng() % 5, b_kind = rng() % 5;
    if (a_kind == 0) {
      a_dims = {k};
    } else {
      const Shape a_batch = RandomBroadcastable(batch, rng);
      for (int64_t d : a_batch.dims()) a_dims.push_back(d);
      a_dims.push_back(m);
      a_dims.push_back(k);
    }
    if (b_kind == 0) {
      b_dims = {k};
    } else {
      const Shape b_batch = RandomBroadcastable(batch, rng);
      for (int64_t d : b_batch.dims()) b_dims.push_back(d);
      b_dims.push_back(k);
      b_dims.push_back(n);
    }
    const Tensor a = RandomTensor(GetParam(), Shape(a_dims), rng);
    const Tensor b = RandomTensor(GetParam(), Shape(b_dims), rng);
    SCOPED_TRACE(::testing::Message() << a.shape().ToString() << " x " << b.shape().ToString());
    Tensor expected;
    const absl::Status ref = reference::MatMul(a, b, expected);
    absl::StatusOr<Tensor> actual = RunOnce("MatMul", 13, {&a, &b});
    if (!ref.ok()) {  // batch dims that do not broadcast
      EXPECT_EQ(actual.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(actual.ok()) << actual.status();
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-5, 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatMulTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                                           DataType::kInt64),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(MatMulSpecTest, ValuesByHand) {
  const Tensor a = MakeTensor<float>({2, 2}, {1, 2, 3, 4});
  const Tensor b = MakeTensor<float>({2, 2}, {5, 6, 7, 8});
  absl::StatusOr<Tensor> c = RunOnce("MatMul", 13, {&a, &b});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(TensorsNear(*c, MakeTensor<float>({2, 2}, {19, 22, 43, 50})));

  // 1-D x 1-D is a dot product of rank 0; 1-D x 2-D drops the promoted row.
  const Tensor v = MakeTensor<float>({2}, {1, 2});
  absl::StatusOr<Tensor> dot = RunOnce("MatMul", 13, {&v, &v});
  ASSERT_TRUE(dot.ok()) << dot.status();
  EXPECT_TRUE(TensorsNear(*dot, MakeTensor<float>({}, {5})));
  absl::StatusOr<Tensor> vb = RunOnce("MatMul", 13, {&v, &b});
  ASSERT_TRUE(vb.ok()) << vb.status();
  EXPECT_TRUE(TensorsNear(*vb, MakeTensor<float>({2}, {19, 22})));
  absl::StatusOr<Tensor> av = RunOnce("MatMul", 13, {&a, &v});
  ASSERT_TRUE(av.ok()) << av.status();
  EXPECT_TRUE(TensorsNear(*av, MakeTensor<float>({2}, {5, 11})));

  // A batch of 2 against one shared matrix.
  const Tensor batched = MakeTensor<float>({2, 1, 2}, {1, 0, 0, 1});
  absl::StatusOr<Tensor> bb = RunOnce("MatMul", 13, {&batched, &b});
  ASSERT_TRUE(bb.ok()) << bb.status();
  EXPECT_TRUE(TensorsNear(*bb, MakeTensor<float>({2, 1, 2}, {5, 6, 7, 8})));
}

TEST(MatMulSpecTest, EmptyInnerDimGivesZeros) {
  const Tensor a(DataType::kFloat32, Shape{2, 0});
  const Tensor b(DataType::kFloat32, Shape{0, 3});
  absl::StatusOr<Tensor> c = RunOnce("MatMul", 13, {&a, &b});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(TensorsNear(*c, MakeTensor<float>({2, 3}, {0, 0, 0, 0, 0, 0})));
  const Tensor e(DataType::kFloat32, Shape{0, 4});
  const Tensor f(DataType::kFloat32, Shape{4, 3});
  absl::StatusOr<Tensor> g = RunOnce("MatMul", 13, {&e, &f});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->shape(), (Shape{0, 3}));
}

TEST(MatMulSpecTest, BadShapesAreRejected) {
  const Tensor a = MakeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  absl::StatusOr<Tensor> c = RunOnce("MatMul", 13, {&a, &a});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("[2,3]"), absl::string_view::npos) << c.status();
  const Tensor s = MakeTensor<float>({}, {1});
  EXPECT_EQ(RunOnce("MatMul", 13, {&s, &a}).status().code(), absl::StatusCode::kInvalidArgument);
}

absl::flat_hash_map<std::string, Attribute> GemmAttributes(const reference::GemmAttrs& attrs) {
  return {{"alpha", FloatAttr(attrs.alpha)},
          {"beta", FloatAttr(attrs.beta)},
          {"transA", IntAttr(attrs.trans_a)},
          {"transB", IntAttr(attrs.trans_b)}};
}

class GemmTest : public ::testing::TestWithParam<DataType> {};

TEST_P(GemmTest, RandomShapesMatchReference) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 80; ++trial) {
    const int64_t m = rng() % 9 == 0 ? 0 : 1 + rng() % 7;
    const int64_t k = rng() % 9 == 0 ? 0 : 1 + rng() % 9;
    const int64_t n = 1 + rng() % 7;
    reference::GemmAttrs attrs;
    attrs.trans_a = rng() % 2;
    attrs.trans_b = rng() % 2;
    if (IsFloatingPoint(GetParam())) {
      const float alphas[] = {1.0f, 0.5f, -2.0f};
      const float betas[] = {1.0f, 0.0f, 0.25f, -1.5f};
      attrs.alpha = alphas[rng() % 3];
      attrs.beta = betas[rng() % 4];
    }
    const Shape c_shapes[] = {Shape{m, n}, Shape{n}, Shape{1, n}, Shape{m, 1}, Shape{}, Shape{1}};
    const int c_choice = rng() % 7;  // 6: no C
    const Tensor a = RandomTensor(GetParam(), attrs.trans_a ? Shape{k, m} : Shape{m, k}, rng);
    const Tensor b = RandomTensor(GetParam(), attrs.trans_b ? Shape{n, k} : Shape{k, n}, rng);
    const Tensor c = RandomTensor(GetParam(), c_choice < 6 ? c_shapes[c_choice] : Shape{}, rng);
    const Tensor* c_ptr = c_choice < 6 ? &c : nullptr;
    SCOPED_TRACE(::testing::Message()
                 << a.shape().ToString() << " " << b.shape().ToString() << " C "
                 << (c_ptr ? c.shape().ToString() : "none") << " alpha " << attrs.alpha << " beta "
                 << attrs.beta << " trans " << attrs.trans_a << attrs.trans_b);
    Tensor expected;
    ASSERT_TRUE(reference::Gemm(a, b, c_ptr, attrs, expected).ok());
    absl::StatusOr<Tensor> actual = RunOnce("Gemm", 13, {&a, &b, c_ptr}, GemmAttributes(attrs));
    ASSERT_TRUE(actual.ok()) << actual.status();
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-5, 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GemmTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                                           DataType::kInt64),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(GemmSpecTest, ValuesByHand) {
  // A^T = [[1,2],[3,4]], B^T = [[1,0],[1,1]]: A'B' = [[3,2],[7,4]];
  // Y = 2 * A'B' + 0.5 * [10, 20] = [[11,14],[19,18]].
  const Tensor a = MakeTensor<float>({2, 2}, {1, 3, 2, 4});
  const Tensor b = MakeTensor<float>({2, 2}, {1, 1, 0, 1});
  const Tensor c = MakeTensor<float>({2}, {10, 20});
  reference::GemmAttrs attrs{2.0f, 0.5f, true, true};
  for (int opset : {7, 9, 11, 13}) {
    absl::StatusOr<Tensor> y = RunOnce("Gemm", opset, {&a, &b, &c}, GemmAttributes(attrs));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsNear(*y, MakeTensor<float>({2, 2}, {11, 14, 19, 18})));
  }
  // Integers: [[1,2]] x [[3],[4]] + [[100]] = [[111]].
  const Tensor ai = MakeTensor<int64_t>({1, 2}, {1, 2});
  const Tensor bi = MakeTensor<int64_t>({2, 1}, {3, 4});
  const Tensor ci = MakeTensor<int64_t>({1, 1}, {100});
  absl::StatusOr<Tensor> yi = RunOnce("Gemm", 13, {&ai, &bi, &ci});
  ASSERT_TRUE(yi.ok()) << yi.status();
  EXPECT_TRUE(TensorsNear(*yi, MakeTensor<int64_t>({1, 1}, {111})));
}

TEST(GemmSpecTest, OptionalCAndLegacyBroadcast) {
  const Tensor a = MakeTensor<float>({1, 2}, {1, 2});
  const Tensor b = MakeTensor<float>({2, 2}, {1, 2, 3, 4});
  absl::StatusOr<Tensor> y = RunOnce("Gemm", 11, {&a, &b, nullptr});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(TensorsNear(*y, MakeTensor<float>({1, 2}, {7, 10})));
  absl::StatusOr<Tensor> y2 = RunOnce("Gemm", 13, {&a, &b});
  ASSERT_TRUE(y2.ok()) << y2.status();
  EXPECT_TRUE(TensorsNear(*y2, MakeTensor<float>({1, 2}, {7, 10})));
  // Before opset 11 C is required.
  EXPECT_EQ(RunOnce("Gemm", 9, {&a, &b, nullptr}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Opset 6: C must be [M, N] unless broadcast=1.
  const Tensor c = MakeTensor<float>({2}, {1, 1});
  EXPECT_EQ(RunOnce("Gemm", 6, {&a, &b, &c}).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Tensor> y3 = RunOnce("Gemm", 6, {&a, &b, &c}, {{"broadcast", IntAttr(1)}});
  ASSERT_TRUE(y3.ok()) << y3.status();
  EXPECT_TRUE(TensorsNear(*y3, MakeTensor<float>({1, 2}, {8, 11})));
  // C that does not broadcast to [M, N].
  const Tensor bad = MakeTensor<float>({3}, {1, 1, 1});
  absl::StatusOr<Tensor> y4 = RunOnce("Gemm", 13, {&a, &b, &bad});
  EXPECT_EQ(y4.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(y4.status().message().find("[3]"), absl::string_view::npos) << y4.status();
}

}  // namespace
}  // namespace loopserve::engine::testing
