// BatchNormalization, InstanceNormalization, LayerNormalization, LRN, LogSoftmax, the parametric
// activations and PRelu against the reference and the spec.

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/dnnl/test_util.h"

namespace loopserve::engine::testing {
namespace {

using Attributes = absl::flat_hash_map<std::string, Attribute>;

// Runs `fn` and checks whether it created a oneDNN primitive (so the oneDNN path ran).
template <typename Fn>
bool CreatesPrimitive(Fn&& fn) {
  const int64_t before = DnnlPrimitiveCreationCount();
  fn();
  return DnnlPrimitiveCreationCount() > before;
}

class NormTest : public ::testing::TestWithParam<DataType> {};

TEST_P(NormTest, BatchNormMatchesReference) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 30; ++trial) {
    const Shape shape = RandomShape(rng, 2, 5, 5);
    const Shape vec{shape[1]};
    const Tensor x = RandomTensor(GetParam(), shape, rng);
    const Tensor scale = RandomTensor(GetParam(), vec, rng);
    const Tensor bias = RandomTensor(GetParam(), vec, rng);
    const Tensor mean = RandomTensor(GetParam(), vec, rng);
    const Tensor var = RandomTensor(GetParam(), vec, rng, Range::kPositive);
    SCOPED_TRACE(shape.ToString());
    const int opset = trial % 2 ? 15 : 9;
    absl::StatusOr<Tensor> actual =
        RunOnce("BatchNormalization", opset, {&x, &scale, &bias, &mean, &var},
                {{"epsilon", FloatAttr(1e-3f)}});
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor expected;
    ASSERT_TRUE(reference::BatchNorm(x, scale, bias, mean, var, 1e-3f, expected).ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-4, 1e-4));
  }
}

TEST_P(NormTest, InstanceNormMatchesReference) {
  std::mt19937 rng(32);
  for (int trial = 0; trial < 30; ++trial) {
    const Shape shape = RandomShape(rng, 3, 5, 5);
    const Shape vec{shape[1]};
    const Tensor x = RandomTensor(GetParam(), shape, rng);
    const Tensor scale = RandomTensor(GetParam(), vec, rng);
    const Tensor bias = RandomTensor(GetParam(), vec, rng);
    SCOPED_TRACE(shape.ToString());
    absl::StatusOr<Tensor> actual =
        RunOnce("InstanceNormalization", 6, {&x, &scale, &bias}, {{"epsilon", FloatAttr(1e-2f)}});
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor expected;
    ASSERT_TRUE(reference::InstanceNorm(x, scale, bias, 1e-2f, expected).ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-4, 1e-4));
  }
}

TEST_P(NormTest, LayerNormMatchesReference) {
  std::mt19937 rng(33);
  for (int trial = 0; trial < 40; ++trial) {
    const Shape shape = RandomShape(rng, 1, 4, 6);
    const int64_t axis = static_cast<int64_t>(rng() % (2 * shape.rank())) - shape.rank();
    const int a = axis < 0 ? axis + shape.rank() : static_cast<int>(axis);
    Shape::Dims normalized(shape.dims().begin() + a, shape.dims().end());
    // Sometimes a scale that broadcasts along the leading normalised dims.
    Shape::Dims scale_dims = normalized;
    if (trial % 3 == 0 && !scale_dims.empty()) scale_dims[0] = 1;
    const Tensor x = RandomTensor(GetParam(), shape, rng);
    const Tensor scale = RandomTensor(GetParam(), Shape(scale_dims), rng);
    const Tensor bias = RandomTensor(GetParam(), Shape(normalized), rng);
    const Tensor* b = trial % 2 ? &bias : nullptr;
    const int outputs = 1 + trial % 3;
    SCOPED_TRACE(::testing::Message()
                 << shape.ToString() << " axis " << axis << " outputs " << outputs);
    absl::StatusOr<std::vector<Tensor>> actual =
        RunOnceOutputs("LayerNormalization", 17, {&x, &scale, b},
                       {{"axis", IntAttr(axis)}, {"epsilon", FloatAttr(1e-3f)}}, outputs);
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor y, mean, inv;
    ASSERT_TRUE(
        reference::LayerNorm(x, scale, b, axis, 1e-3f, DataType::kFloat32, y, &mean, &inv).ok());
    EXPECT_TRUE(TensorsNear((*actual)[0], y, 1e-4, 1e-4));
    if (outputs > 1) {
      EXPECT_TRUE(TensorsNear((*actual)[1], mean, 1e-5, 1e-5));
    }
    if (outputs > 2) {
      EXPECT_TRUE(TensorsNear((*actual)[2], inv, 1e-4, 1e-4));
    }
  }
}

TEST_P(NormTest, LrnMatchesReference) {
  std::mt19937 rng(34);
  for (int trial = 0; trial < 30; ++trial) {
    const Shape shape = RandomShape(rng, 2, 5, 6);
    const int64_t size = 1 + static_cast<int64_t>(rng() % 5);
    const Tensor x = RandomTensor(GetParam(), shape, rng);
    SCOPED_TRACE(::testing::Message() << shape.ToString() << " size " << size);
    absl::StatusOr<Tensor> actual = RunOnce("LRN", 13, {&x},
                                            {{"size", IntAttr(size)},
                                             {"alpha", FloatAttr(0.02f)},
                                             {"beta", FloatAttr(0.6f)},
                                             {"bias", FloatAttr(1.5f)}});
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor expected;
    ASSERT_TRUE(reference::Lrn(x, size, 0.02f, 0.6f, 1.5f, expected).ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-4, 1e-5));
  }
}

TEST_P(NormTest, LogSoftmaxMatchesReference) {
  std::mt19937 rng(35);
  for (int trial = 0; trial < 40; ++trial) {
    const Shape shape = RandomShape(rng, 1, 4, 6);
    const int opset = trial % 2 ? 13 : 11;
    const int64_t axis = static_cast<int64_t>(rng() % (2 * shape.rank())) - shape.rank();
    const Tensor x = RandomTensor(GetParam(), shape, rng);
    SCOPED_TRACE(::testing::Message()
                 << shape.ToString() << " axis " << axis << " opset " << opset);
    absl::StatusOr<Tensor> actual = RunOnce("LogSoftmax", opset, {&x}, {{"axis", IntAttr(axis)}});
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor expected;
    ASSERT_TRUE(reference::LogSoftmax(x, axis, opset < 13, expected).ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-5, 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, NormTest, ::testing::Values(DataType::kFloat32, DataType::kFloat64),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

// Rows of model widths (not multiples of the vector width), float32, one output, whole-row scale
// and bias: the native per-row passes (no primitive), against the reference; with the statistics
// outputs or a broadcasting scale, the primitive.
TEST(NormTest, LayerNormSmallRowsRunNatively) {
  std::mt19937 rng(37);
  for (const Shape& shape : {Shape{1, 256}, Shape{3, 1000}, Shape{2, 5, 257}, Shape{1, 1}}) {
    const int64_t n = shape[shape.rank() - 1];
    // An offset row: the centred two-pass variance must not lose the spread to the mean.
    Tensor x = RandomTensor(DataType::kFloat32, shape, rng);
    for (int64_t i = 0; i < x.NumElements(); ++i) x.mutable_data<float>()[i] += 100.0f;
    const Tensor scale = RandomTensor(DataType::kFloat32, Shape{n}, rng);
    const Tensor bias = RandomTensor(DataType::kFloat32, Shape{n}, rng);
    for (const Tensor* b : {&bias, static_cast<const Tensor*>(nullptr)}) {
      SCOPED_TRACE(::testing::Message() << shape.ToString() << " bias " << (b != nullptr));
      absl::StatusOr<std::unique_ptr<NodeRunner>> runner =
          NodeRunner::Create("LayerNormalization", 17, 3, {{"epsilon", FloatAttr(1e-5f)}},
                             b == nullptr ? std::vector<int>{2} : std::vector<int>{});
      ASSERT_TRUE(runner.ok()) << runner.status();
      // NodeRunner keeps small tensors on oneDNN; this test wants the engine's default.
      SetNativeElementwiseLimit(kNativeElementwiseLimit);
      absl::StatusOr<const Tensor*> actual;
      EXPECT_FALSE(CreatesPrimitive([&] { actual = (*runner)->Run({&x, &scale, b}); }));
      SetNativeElementwiseLimit(0);
      ASSERT_TRUE(actual.ok()) << actual.status();
      Tensor y;
      ASSERT_TRUE(
          reference::LayerNorm(x, scale, b, -1, 1e-5f, DataType::kFloat32, y, nullptr, nullptr)
              .ok());
      EXPECT_TRUE(TensorsNear(**actual, y, 1e-4, 1e-4));
    }
  }
}

// Random BatchNormalization operands for an [N, C, ...] input: x, and per-channel scale, bias,
// mean and a positive variance.
struct BatchNormInputs {
  BatchNormInputs(const Shape& shape, std::mt19937& rng)
      : x(RandomTensor(DataType::kFloat32, shape, rng)),
        scale(RandomTensor(DataType::kFloat32, Shape{shape[1]}, rng)),
        bias(RandomTensor(DataType::kFloat32, Shape{shape[1]}, rng)),
        mean(RandomTensor(DataType::kFloat32, Shape{shape[1]}, rng)),
        var(RandomTensor(DataType::kFloat32, Shape{shape[1]}, rng, Range::kPositive)) {}
  Tensor x, scale, bias, mean, var;
};

// BatchNormalization and InstanceNormalization run float32 on native vector passes (oneDNN 2.6
// has only its reference implementation for them on plain layouts): no step on a reference
// kernel, oneDNN's or ours, at ranks 3 to 5 and with a batch, and the values of the reference.
TEST(NormTest, BatchAndInstanceNormRunOffTheReference) {
  std::mt19937 rng(37);
  for (const Shape& shape : {Shape{1, 96, 3136}, Shape{2, 3, 4, 5}, Shape{2, 5, 3, 2, 3}}) {
    SCOPED_TRACE(shape.ToString());
    const BatchNormInputs operands(shape, rng);
    const Tensor &x = operands.x, &scale = operands.scale, &bias = operands.bias,
                 &mean = operands.mean, &var = operands.var;
    absl::StatusOr<std::unique_ptr<NodeRunner>> bn =
        NodeRunner::Create("BatchNormalization", 15, 5, {{"epsilon", FloatAttr(1e-3f)}});
    ASSERT_TRUE(bn.ok()) << bn.status();
    absl::StatusOr<const Tensor*> y = (*bn)->Run({&x, &scale, &bias, &mean, &var});
    ASSERT_TRUE(y.ok()) << y.status();
    Tensor expected;
    ASSERT_TRUE(reference::BatchNorm(x, scale, bias, mean, var, 1e-3f, expected).ok());
    EXPECT_TRUE(TensorsNear(**y, expected, 1e-5, 1e-5));
    EXPECT_EQ((*bn)->stats().reference_steps, 0);

    absl::StatusOr<std::unique_ptr<NodeRunner>> in =
        NodeRunner::Create("InstanceNormalization", 6, 3, {{"epsilon", FloatAttr(1e-2f)}});
    ASSERT_TRUE(in.ok()) << in.status();
    y = (*in)->Run({&x, &scale, &bias});
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_TRUE(reference::InstanceNorm(x, scale, bias, 1e-2f, expected).ok());
    EXPECT_TRUE(TensorsNear(**y, expected, 1e-4, 1e-4));
    EXPECT_EQ((*in)->stats().reference_steps, 0);
  }
}

// Inference BatchNormalization on short planes (rank 2 [N, C], or little spatial extent) takes a
// per-sample pass: the spec's (x - mean) / sqrt(var + epsilon) * scale + B evaluated in double.
TEST(NormTest, BatchNormShortPlanesMatchDefinition) {
  std::mt19937 rng(38);
  for (const Shape& shape :
       {Shape{16, 1024}, Shape{3, 2500}, Shape{2, 700, 3}, Shape{3, 5}, Shape{1, 7}, Shape{4, 6, 3},
        Shape{2, 3, 2, 2}, Shape{2, 3, 1, 1, 5}}) {
    SCOPED_TRACE(shape.ToString());
    const BatchNormInputs operands(shape, rng);
    const Tensor &x = operands.x, &scale = operands.scale, &bias = operands.bias,
                 &mean = operands.mean, &var = operands.var;
    absl::StatusOr<std::unique_ptr<NodeRunner>> bn =
        NodeRunner::Create("BatchNormalization", 15, 5, {{"epsilon", FloatAttr(1e-3f)}});
    ASSERT_TRUE(bn.ok()) << bn.status();
    absl::StatusOr<const Tensor*> y = (*bn)->Run({&x, &scale, &bias, &mean, &var});
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ((*y)->shape(), shape);
    EXPECT_EQ((*bn)->stats().reference_steps, 0);
    const int64_t channels = shape[1], spatial = shape.NumElements(2, shape.rank());
    const float* got = (*y)->data<float>();
    for (int64_t i = 0; i < x.NumElements(); ++i) {
      const int64_t c = (i / spatial) % channels;
      const double e =
          (static_cast<double>(x.data<float>()[i]) - mean.data<float>()[c]) /
              std::sqrt(static_cast<double>(var.data<float>()[c]) + static_cast<double>(1e-3f)) *
              scale.data<float>()[c] +
          bias.data<float>()[c];
      ASSERT_NEAR(got[i], e, 1e-5 * std::max(1.0, std::abs(e))) << "element " << i;
    }
  }
}

TEST(NormTest, OneDnnRunsFloat32) {
  std::mt19937 rng(36);
  const Tensor x = RandomTensor(DataType::kFloat32, Shape{2, 3, 4, 5}, rng);
  const Tensor v = RandomTensor(DataType::kFloat32, Shape{3}, rng, Range::kPositive);
  const Tensor row = RandomTensor(DataType::kFloat32, Shape{5}, rng);
  EXPECT_TRUE(CreatesPrimitive([&] {
    ASSERT_TRUE(RunOnceOutputs("LayerNormalization", 17, {&x, &row, &row}, {}, 3).ok());
  }));
  EXPECT_TRUE(CreatesPrimitive([&] {
    ASSERT_TRUE(RunOnce("LRN", 13, {&x}, {{"size", IntAttr(3)}}).ok());
  }));
  EXPECT_TRUE(CreatesPrimitive([&] { ASSERT_TRUE(RunOnce("LogSoftmax", 13, {&x}).ok()); }));
}

TEST(NormSpecTest, ValuesByHand) {
  // BatchNormalization, epsilon 0: channel 0 mean 1.5 sd 0.5; channel 1 scale 2, bias 1.
  const Tensor x = MakeTensor<float>({1, 2, 1, 2}, {1, 2, 3, 4});
  const Tensor scale = MakeTensor<float>({2}, {1, 2});
  const Tensor bias = MakeTensor<float>({2}, {0, 1});
  const Tensor mean = MakeTensor<float>({2}, {1.5f, 3.5f});
  const Tensor var = MakeTensor<float>({2}, {0.25f, 0.25f});
  for (int opset : {6, 7, 9, 14, 15}) {
    absl::StatusOr<Tensor> bn = RunOnce(
        "BatchNormalization", opset, {&x, &scale, &bias, &mean, &var}, {{"epsilon", FloatAttr(0)}});
    ASSERT_TRUE(bn.ok()) << bn.status();
    EXPECT_TRUE(TensorsNear(*bn, MakeTensor<float>({1, 2, 1, 2}, {-1, 1, -1, 3})));
  }
  // InstanceNormalization: [1, 3] has mean 2 and variance 1.
  const Tensor xi = MakeTensor<float>({1, 1, 1, 2}, {1, 3});
  const Tensor s = MakeTensor<float>({1}, {2});
  const Tensor b = MakeTensor<float>({1}, {1});
  absl::StatusOr<Tensor> in =
      RunOnce("InstanceNormalization", 6, {&xi, &s, &b}, {{"epsilon", FloatAttr(0)}});
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(TensorsNear(*in, MakeTensor<float>({1, 1, 1, 2}, {-1, 3})));
  // LayerNormalization over the last axis: rows [1, 3] and [0, 4].
  const Tensor xl = MakeTensor<float>({2, 2}, {1, 3, 0, 4});
  const Tensor ones = MakeTensor<float>({2}, {1, 1});
  absl::StatusOr<std::vector<Tensor>> ln =
      RunOnceOutputs("LayerNormalization", 17, {&xl, &ones}, {{"epsilon", FloatAttr(0)}}, 3);
  ASSERT_TRUE(ln.ok()) << ln.status();
  EXPECT_TRUE(TensorsNear((*ln)[0], MakeTensor<float>({2, 2}, {-1, 1, -1, 1})));
  EXPECT_TRUE(TensorsNear((*ln)[1], MakeTensor<float>({2, 1}, {2, 2})));
  EXPECT_TRUE(TensorsNear((*ln)[2], MakeTensor<float>({2, 1}, {1, 0.5f})));
  // LRN size 3, alpha 3 (so alpha / size = 1), beta 1, bias 1.
  const Tensor xr = MakeTensor<float>({1, 3, 1, 1}, {1, 2, 3});
  absl::StatusOr<Tensor> lrn = RunOnce(
      "LRN", 13, {&xr}, {{"size", IntAttr(3)}, {"alpha", FloatAttr(3)}, {"beta", FloatAttr(1)}});
  ASSERT_TRUE(lrn.ok()) << lrn.status();
  EXPECT_TRUE(TensorsNear(*lrn, MakeTensor<float>({1, 3, 1, 1}, {1.0f / 6, 2.0f / 15, 3.0f / 14})));
  // LogSoftmax of [1, 2, 3].
  const Tensor xs = MakeTensor<float>({1, 3}, {1, 2, 3});
  absl::StatusOr<Tensor> ls = RunOnce("LogSoftmax", 13, {&xs});
  ASSERT_TRUE(ls.ok()) << ls.status();
  EXPECT_TRUE(
      TensorsNear(*ls, MakeTensor<float>({1, 3}, {-2.40760596f, -1.40760596f, -0.40760596f})));
}

TEST(NormSpecTest, EmptyAndInvalid) {
  const Tensor v = MakeTensor<float>({2}, {1, 1});
  const Tensor empty(DataType::kFloat32, Shape{0, 2, 3});
  absl::StatusOr<Tensor> bn = RunOnce("BatchNormalization", 15, {&empty, &v, &v, &v, &v});
  ASSERT_TRUE(bn.ok()) << bn.status();
  EXPECT_EQ(bn->shape(), (Shape{0, 2, 3}));
  absl::StatusOr<Tensor> in = RunOnce("InstanceNormalization", 6, {&empty, &v, &v});
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->shape(), (Shape{0, 2, 3}));
  const Tensor no_rows(DataType::kFloat32, Shape{0, 2});
  absl::StatusOr<std::vector<Tensor>> ln =
      RunOnceOutputs("LayerNormalization", 17, {&no_rows, &v}, {}, 3);
  ASSERT_TRUE(ln.ok()) << ln.status();
  EXPECT_EQ((*ln)[2].shape(), (Shape{0, 1}));

  const Tensor x = MakeTensor<float>({1, 3, 2}, {1, 2, 3, 4, 5, 6});
  // Statistics that do not match the channels.
  EXPECT_EQ(RunOnce("BatchNormalization", 15, {&x, &v, &v, &v, &v}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOnce("InstanceNormalization", 6, {&x, &v, &v}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const Tensor wrong = MakeTensor<float>({3}, {1, 1, 1});
  EXPECT_EQ(RunOnce("LayerNormalization", 17, {&x, &wrong}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOnce("LayerNormalization", 17, {&x, &v}, {{"axis", IntAttr(3)}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOnce("LRN", 13, {&x}, {{"size", IntAttr(0)}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Training mode (opset 14+) normalises with the batch's statistics: channel c of x holds
  // (2c+1, 2c+2), mean 2c+1.5 and variance 0.25, so y = (+-0.5) / sqrt(0.25 + 1e-5).
  const Tensor s3 = MakeTensor<float>({3}, {1, 1, 1});
  const Tensor z3 = MakeTensor<float>({3}, {0, 0, 0});
  absl::StatusOr<Tensor> training =
      RunOnce("BatchNormalization", 15, {&x, &s3, &z3, &s3, &s3}, {{"training_mode", IntAttr(1)}});
  ASSERT_TRUE(training.ok()) << training.status();
  const float unit = 0.5f / std::sqrt(0.25f + 1e-5f);
  EXPECT_TRUE(TensorsNear(*training,
                          MakeTensor<float>({1, 3, 2}, {-unit, unit, -unit, unit, -unit, unit})));
  // Opset 9's saved-statistics outputs are not supported.
  absl::StatusOr<std::vector<Tensor>> stats =
      RunOnceOutputs("BatchNormalization", 9, {&x, &s3, &s3, &s3, &s3}, {}, 3);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnimplemented) << stats.status();
}

struct ActivationCase {
  const char* name;
  reference::ActivationOp op;
  reference::ActivationParams params;
  Attributes attrs;
  bool dnnl;  // runs on oneDNN for float32
};

std::vector<ActivationCase> ActivationCases() {
  using reference::ActivationOp;
  return {
      {"LeakyRelu", ActivationOp::kLeakyRelu, {0.1f}, {{"alpha", FloatAttr(0.1f)}}, true},
      {"LeakyRelu", ActivationOp::kLeakyRelu, {0.01f}, {}, true},
      {"Elu", ActivationOp::kElu, {2.0f}, {{"alpha", FloatAttr(2)}}, true},
      {"Selu",
       ActivationOp::kSelu,
       {1.5f, 0, 2.0f},
       {{"alpha", FloatAttr(1.5f)}, {"gamma", FloatAttr(2)}},
       false},
      {"HardSigmoid",
       ActivationOp::kHardSigmoid,
       {0.3f, 0.4f},
       {{"alpha", FloatAttr(0.3f)}, {"beta", FloatAttr(0.4f)}},
       false},
      {"HardSwish", ActivationOp::kHardSwish, {}, {}, true},
      {"Softplus", ActivationOp::kSoftplus, {}, {}, true},
      {"Softsign", ActivationOp::kSoftsign, {}, {}, false},
      {"Celu", ActivationOp::kCelu, {0.5f}, {{"alpha", FloatAttr(0.5f)}}, false},
  };
}

class ActivationTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ActivationTest, RandomShapesMatchReference) {
  std::mt19937 rng(41);
  for (const ActivationCase& c : ActivationCases()) {
    for (int trial = 0; trial < 8; ++trial) {
      const Shape shape = trial == 0 ? Shape{} : RandomShape(rng, 0, 4, 7);
      const Tensor x = RandomTensor(GetParam(), shape, rng);
      SCOPED_TRACE(::testing::Message() << c.name << " " << shape.ToString());
      absl::StatusOr<Tensor> actual;
      const bool created = CreatesPrimitive([&] { actual = RunOnce(c.name, 16, {&x}, c.attrs); });
      ASSERT_TRUE(actual.ok()) << actual.status();
      if (GetParam() == DataType::kFloat32 && x.NumElements() > 0) {
        EXPECT_EQ(created, c.dnnl);
      }
      Tensor expected;
      ASSERT_TRUE(reference::Activation(c.op, c.params, x, expected).ok());
      EXPECT_TRUE(TensorsNear(*actual, expected, 1e-5, 1e-5));
    }
  }
}

TEST_P(ActivationTest, PReluBroadcastsTheSlope) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 40; ++trial) {
    const Shape shape = RandomShape(rng, 1, 5, 5);
    const Shape slope_shape = RandomBroadcastable(shape, rng);
    const Tensor x = RandomTensor(GetParam(), shape, rng);
    const Tensor slope = RandomTensor(GetParam(), slope_shape, rng);
    SCOPED_TRACE(::testing::Message() << shape.ToString() << " slope " << slope_shape.ToString());
    absl::StatusOr<Tensor> actual = RunOnce("PRelu", 16, {&x, &slope});
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor expected;
    ASSERT_TRUE(reference::PRelu(x, slope, expected).ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-6, 1e-6));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ActivationTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat64),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(ActivationSpecTest, ValuesByHand) {
  const Tensor x = MakeTensor<float>({4}, {-4, -1, 0, 2});
  const std::vector<std::tuple<const char*, Attributes, std::vector<float>>> cases = {
      {"LeakyRelu", {{"alpha", FloatAttr(0.1f)}}, {-0.4f, -0.1f, 0, 2}},
      {"Elu", {{"alpha", FloatAttr(2)}}, {-1.96337213f, -1.26424112f, 0, 2}},
      {"Selu", {}, {-1.7258986f, -1.11133074f, 0, 2.10140204f}},
      {"HardSigmoid", {}, {0, 0.3f, 0.5f, 0.9f}},
      {"HardSwish", {}, {0, -0.33333333f, 0, 1.66666667f}},
      {"Softplus", {}, {0.01814993f, 0.31326169f, 0.69314718f, 2.12692801f}},
      {"Softsign", {}, {-0.8f, -0.5f, 0, 0.66666667f}},
      {"Celu", {{"alpha", FloatAttr(2)}}, {-1.72932943f, -0.78693868f, 0, 2}},
  };
  for (const auto& [op, attrs, values] : cases) {
    SCOPED_TRACE(op);
    absl::StatusOr<Tensor> y = RunOnce(op, 16, {&x}, attrs);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsNear(*y, MakeTensor<float>({4}, values), 1e-5, 1e-6));
  }
  // PRelu with a per-channel slope [3, 1, 1] on [1, 3, 1, 2].
  const Tensor xp = MakeTensor<float>({1, 3, 1, 2}, {-1, 1, -2, 2, -3, 3});
  const Tensor slope = MakeTensor<float>({3, 1, 1}, {0.5f, 0, 2});
  absl::StatusOr<Tensor> prelu = RunOnce("PRelu", 9, {&xp, &slope});
  ASSERT_TRUE(prelu.ok()) << prelu.status();
  EXPECT_TRUE(TensorsNear(*prelu, MakeTensor<float>({1, 3, 1, 2}, {-0.5f, 1, 0, 2, -6, 3})));
}

TEST(ActivationSpecTest, EmptyAndInvalid) {
  const Tensor empty(DataType::kFloat32, Shape{0, 3});
  for (const ActivationCase& c : ActivationCases()) {
    absl::StatusOr<Tensor> y = RunOnce(c.name, 16, {&empty}, c.attrs);
    ASSERT_TRUE(y.ok()) << c.name << ": " << y.status();
    EXPECT_EQ(y->shape(), (Shape{0, 3}));
  }
  const Tensor ints = MakeTensor<int32_t>({2}, {1, -1});
  EXPECT_EQ(RunOnce("Elu", 6, {&ints}).status().code(), absl::StatusCode::kInvalidArgument);
  const Tensor x = MakeTensor<float>({2}, {1, -1});
  EXPECT_EQ(RunOnce("Celu", 12, {&x}, {{"alpha", FloatAttr(0)}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The slope must broadcast onto X, not the other way round.
  const Tensor slope = MakeTensor<float>({2, 2}, {1, 1, 1, 1});
  EXPECT_EQ(RunOnce("PRelu", 16, {&x, &slope}).status().code(), absl::StatusCode::kInvalidArgument);
  const Tensor e_slope(DataType::kFloat32, Shape{3});
  absl::StatusOr<Tensor> prelu = RunOnce("PRelu", 16, {&empty, &e_slope});
  ASSERT_TRUE(prelu.ok()) << prelu.status();
  EXPECT_EQ(prelu->shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace loopserve::engine::testing
