// ConvInteger and QLinearConv against the reference float Conv of the zero-point-shifted values
// (exact in double for 8-bit inputs), and BatchNormalization's training mode against the batch
// statistics computed here.

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/int8_gemm.h"
#include "engine/kernels/native/int8_gemm_dnnl.h"
#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/dnnl/test_util.h"

namespace loopserve::engine::testing {
namespace {

using Attributes = absl::flat_hash_map<std::string, Attribute>;

int64_t Pick(std::mt19937& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

Tensor Random8(DataType type, const Shape& shape, std::mt19937& rng) {
  Tensor t(type, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    if (type == DataType::kUint8) {
      t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
    } else {
      t.mutable_data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
    }
  }
  return t;
}

double At(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kUint8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
}

// `t` minus its zero point(s) as float64 (per channel along axis 0 when `zp` has C values).
Tensor Shifted(const Tensor& t, const Tensor& zp) {
  Tensor out(DataType::kFloat64, t.shape());
  const int64_t channel = t.NumElements() / t.dim(0);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    const double z = At(zp, zp.NumElements() == 1 ? 0 : i / channel);
    out.mutable_data<double>()[i] = At(t, i) - z;
  }
  return out;
}

TEST(IntConvTest, MatchesShiftedFloatConv) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    const int rank = 1 + trial % 2;
    const int64_t group = Pick(rng, 1, 2);
    const int64_t c = group * Pick(rng, 1, 2), m = group * Pick(rng, 1, 3);
    reference::WindowAttrs window;
    Shape::Dims x_dims = {Pick(rng, 1, 2), c}, w_dims = {m, c / group};
    for (int i = 0; i < rank; ++i) {
      const int64_t k = Pick(rng, 1, 3);
      window.kernel_shape.push_back(k);
      window.strides.push_back(Pick(rng, 1, 2));
      window.dilations.push_back(1);
      x_dims.push_back(k + Pick(rng, 0, 4));
      w_dims.push_back(k);
    }
    for (int i = 0; i < 2 * rank; ++i) window.pads.push_back(Pick(rng, 0, 1));
    const DataType xt = trial % 2 ? DataType::kUint8 : DataType::kInt8;
    const DataType wt = trial % 3 ? DataType::kUint8 : DataType::kInt8;
    const Tensor x = Random8(xt, Shape(x_dims), rng);
    const Tensor w = Random8(wt, Shape(w_dims), rng);
    const Tensor x_zp = Random8(xt, Shape{}, rng);
    const Tensor w_zp = Random8(wt, trial % 4 ? Shape{} : Shape{m}, rng);
    Attributes attrs = {{"strides", IntsAttr(window.strides)},
                        {"pads", IntsAttr(window.pads)},
                        {"group", IntAttr(group)}};
    SCOPED_TRACE(::testing::Message()
                 << "x " << Shape(x_dims).ToString() << " w " << Shape(w_dims).ToString());
    Tensor expected;
    ASSERT_TRUE(
        reference::Conv(Shifted(x, x_zp), Shifted(w, w_zp), nullptr, window, group, expected).ok());
    absl::StatusOr<Tensor> conv = RunOnce("ConvInteger", 10, {&x, &w, &x_zp, &w_zp}, attrs);
    ASSERT_TRUE(conv.ok()) << conv.status();
    ASSERT_EQ(conv->dtype(), DataType::kInt32);
    ASSERT_EQ(conv->shape(), expected.shape());
    for (int64_t i = 0; i < expected.NumElements(); ++i) {
      ASSERT_EQ(conv->data<int32_t>()[i], static_cast<int32_t>(expected.data<double>()[i])) << i;
    }
    // QLinearConv of the same: (acc + B) * x_scale * w_scale / y_scale, rounded half to even,
    // plus y_zero_point, saturated.
    const Tensor x_scale = MakeTensor<float>({}, {0.02f});
    const Tensor w_scale = MakeTensor<float>({}, {0.05f});
    const Tensor y_scale = MakeTensor<float>({}, {0.7f});
    const Tensor y_zp = MakeTensor<uint8_t>({}, {100});
    Tensor bias(DataType::kInt32, Shape{m});
    for (int64_t i = 0; i < m; ++i)
      bias.mutable_data<int32_t>()[i] = static_cast<int32_t>(i * 37 - 50);
    absl::StatusOr<Tensor> q =
        RunOnce("QLinearConv", 10,
                {&x, &x_scale, &x_zp, &w, &w_scale, &w_zp, &y_scale, &y_zp, &bias}, attrs);
    ASSERT_TRUE(q.ok()) << q.status();
    const int64_t per_channel = expected.NumElements() / (expected.dim(0) * m);
    for (int64_t i = 0; i < expected.NumElements(); ++i) {
      const int64_t channel = (i / per_channel) % m;
      const double v = std::nearbyint((expected.data<double>()[i] + bias.data<int32_t>()[channel]) *
                                      static_cast<double>(0.02f) * static_cast<double>(0.05f) /
                                      static_cast<double>(0.7f)) +
                       100;
      EXPECT_EQ(q->data<uint8_t>()[i], static_cast<uint8_t>(std::min(std::max(v, 0.0), 255.0)))
          << i;
    }
  }
}

// Constant weights (the other test feeds them as inputs) over two runs of one model: 2 groups,
// int8 weights with per-channel zero points, uint8 input, stride 2 and padding, against the
// reference float Conv of the shifted values.
TEST(IntConvTest, ConstantWeights) {
  std::mt19937 rng(9);
  const int64_t group = 2, c = 4, m = 6;
  const Tensor x = Random8(DataType::kUint8, Shape{2, c, 7, 9}, rng);
  const Tensor w = Random8(DataType::kInt8, Shape{m, c / group, 3, 2}, rng);
  const Tensor x_zp = Random8(DataType::kUint8, Shape{}, rng);
  const Tensor w_zp = Random8(DataType::kInt8, Shape{m}, rng);
  reference::WindowAttrs window;
  window.kernel_shape = {3, 2};
  window.strides = {2, 1};
  window.dilations = {1, 1};
  window.pads = {1, 0, 1, 1};
  Tensor expected;
  ASSERT_TRUE(
      reference::Conv(Shifted(x, x_zp), Shifted(w, w_zp), nullptr, window, group, expected).ok());

  auto g = std::make_shared<Graph>();
  const ValueId vx = g->AddValue("x"), vw = g->AddValue("w"), vxz = g->AddValue("xz"),
                vwz = g->AddValue("wz"), vy = g->AddValue("y");
  g->constants.emplace_back(vw, std::make_shared<Tensor>(Tensor::ViewOf(w)));
  g->constants.emplace_back(vwz, std::make_shared<Tensor>(Tensor::ViewOf(w_zp)));
  Node node;
  node.name = "conv";
  node.op_type = "ConvInteger";
  node.opset = 10;
  node.inputs = {vx, vw, vxz, vwz};
  node.outputs = {vy};
  node.attributes["strides"] = IntsAttr(window.strides);
  node.attributes["pads"] = IntsAttr(window.pads);
  node.attributes["group"] = IntAttr(group);
  g->nodes.push_back(std::move(node));
  g->inputs = {vx, vxz};
  g->outputs = {vy};
  auto model = Model::FromGraph(g);
  ASSERT_TRUE(model.ok()) << model.status();
  for (int run = 0; run < 2; ++run) {  // the frame's buffers reused
    std::vector<Value> feed;
    feed.push_back(Value(Tensor::ViewOf(x)));
    feed.push_back(Value(Tensor::ViewOf(x_zp)));
    auto out = (*model)->Run(std::move(feed), RunOptions());
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& y = (*out)[0].tensor();
    ASSERT_EQ(y.shape(), expected.shape());
    for (int64_t i = 0; i < expected.NumElements(); ++i) {
      ASSERT_EQ(y.data<int32_t>()[i], static_cast<int32_t>(expected.data<double>()[i])) << i;
    }
  }
}

// ConvInteger with constant weights and one group, the node oneDNN's int8 convolution takes on an
// AVX-512 VNNI / AMX CPU (weights moved to int8, a channel of ones for the weight zero points,
// x moved to channels-last and the result back): per-channel and per-tensor zero points, uint8
// and int8 x and w, padding (which must count as x's zero point), strides and dilations, odd
// channel counts; exact against the reference Conv of the shifted values, with the oneDNN path on
// (a primitive is created on such a CPU) and off (the native kernel).
TEST(IntConvTest, ConstantWeightsOneGroupOnOneDnnAndNative) {
  struct Case {
    Shape::Dims x, w;
    std::vector<int64_t> strides, dilations, pads;
    DataType xt, wt;
    bool per_channel;
  };
  const std::vector<Case> cases = {
      {{1, 64, 20, 23},
       {64, 64, 3, 3},
       {1, 1},
       {1, 1},
       {1, 1, 1, 1},
       DataType::kUint8,
       DataType::kUint8,
       false},
      {{2, 13, 17, 9},
       {7, 13, 3, 3},
       {1, 1},
       {2, 2},
       {2, 2, 2, 2},
       DataType::kUint8,
       DataType::kInt8,
       true},
      {{1, 5, 31, 30},
       {11, 5, 3, 1},
       {2, 1},
       {1, 1},
       {1, 0, 0, 0},
       DataType::kInt8,
       DataType::kUint8,
       true},
      {{1, 32, 12, 12},
       {32, 32, 3, 3},
       {1, 1},
       {1, 1},
       {1, 1, 1, 1},
       DataType::kUint8,
       DataType::kInt8,
       false},  // w int8 with zero point 0 below: no channel of ones
  };
  std::mt19937 rng(128);
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const Tensor x = Random8(c.xt, Shape(c.x), rng);
    const Tensor w = Random8(c.wt, Shape(c.w), rng);
    const Tensor x_zp = Random8(c.xt, Shape{}, rng);
    Tensor w_zp = Random8(c.wt, c.per_channel ? Shape{c.w[0]} : Shape{}, rng);
    if (ci == 3) w_zp.mutable_data<int8_t>()[0] = 0;
    reference::WindowAttrs window;
    window.kernel_shape.assign(c.w.begin() + 2, c.w.end());
    window.strides = c.strides;
    window.dilations = c.dilations;
    window.pads = c.pads;
    Tensor expected;
    ASSERT_TRUE(
        reference::Conv(Shifted(x, x_zp), Shifted(w, w_zp), nullptr, window, 1, expected).ok());
    auto g = std::make_shared<Graph>();
    const ValueId vx = g->AddValue("x"), vw = g->AddValue("w"), vxz = g->AddValue("xz"),
                  vwz = g->AddValue("wz"), vy = g->AddValue("y");
    g->constants.emplace_back(vw, std::make_shared<Tensor>(Tensor::ViewOf(w)));
    g->constants.emplace_back(vwz, std::make_shared<Tensor>(Tensor::ViewOf(w_zp)));
    Node node;
    node.name = "conv";
    node.op_type = "ConvInteger";
    node.opset = 10;
    node.inputs = {vx, vw, vxz, vwz};
    node.outputs = {vy};
    node.attributes["strides"] = IntsAttr(window.strides);
    node.attributes["dilations"] = IntsAttr(window.dilations);
    node.attributes["pads"] = IntsAttr(window.pads);
    g->nodes.push_back(std::move(node));
    g->inputs = {vx, vxz};
    g->outputs = {vy};
    auto model = Model::FromGraph(g);
    ASSERT_TRUE(model.ok()) << model.status();
    for (const bool dnnl : {true, false}) {
      native::DnnlInt8Gemm::SetEnabled(dnnl);
      SCOPED_TRACE(::testing::Message() << "case " << ci << " oneDNN " << dnnl);
      const int64_t created = DnnlPrimitiveCreationCount();
      for (int run = 0; run < 2; ++run) {
        std::vector<Value> feed;
        feed.push_back(Value(Tensor::ViewOf(x)));
        feed.push_back(Value(Tensor::ViewOf(x_zp)));
        auto out = (*model)->Run(std::move(feed), RunOptions());
        ASSERT_TRUE(out.ok()) << out.status();
        const Tensor& y = (*out)[0].tensor();
        ASSERT_EQ(y.shape(), expected.shape());
        for (int64_t i = 0; i < expected.NumElements(); ++i) {
          ASSERT_EQ(y.data<int32_t>()[i], static_cast<int32_t>(expected.data<double>()[i])) << i;
        }
      }
      if (dnnl && native::Int8Gemm::BestPath() == native::Int8Gemm::Path::kAvx512Vnni) {
        EXPECT_GT(DnnlPrimitiveCreationCount(), created);  // the oneDNN path ran
      }
    }
    native::DnnlInt8Gemm::SetEnabled(true);
  }
}

// Images whose im2col spans several blocks of output rows (the kernel runs about 256 KB of columns
// at a time), on every product path the CPU has (scalar, AVX2 `vpmaddwd`, AVX-512 VNNI): odd
// channel counts, groups, dilations as ISNet's (2), strides along the last dim, 3-D windows,
// per-channel and per-tensor zero points of both signednesses, ConvInteger exact against the
// reference Conv of the shifted values and QLinearConv requantised from it.
TEST(IntConvTest, ImagesLargerThanOneBlockOnEveryPath) {
  struct Case {
    Shape::Dims x, w;
    std::vector<int64_t> strides, dilations, pads;
    int64_t group;
    DataType xt, wt;
    bool per_channel;
  };
  const std::vector<Case> cases = {
      {{1, 9, 70, 300},
       {13, 9, 3, 3},
       {1, 1},
       {2, 2},
       {2, 1, 2, 2},
       1,
       DataType::kUint8,
       DataType::kUint8,
       false},
      {{2, 9, 41, 257},
       {12, 3, 3, 3},
       {1, 2},
       {1, 1},
       {1, 1, 1, 1},
       3,
       DataType::kInt8,
       DataType::kInt8,
       true},
      {{1, 5, 9, 33, 61},
       {7, 5, 3, 2, 3},
       {1, 1, 1},
       {1, 2, 1},
       {1, 0, 1, 1, 1, 0},
       1,
       DataType::kUint8,
       DataType::kInt8,
       true},
  };
  std::vector<native::Isa> isas = {native::Isa::kScalar};
  if (native::DetectedIsa() >= native::Isa::kAvx2) isas.push_back(native::Isa::kAvx2);
  if (native::DetectedIsa() >= native::Isa::kAvx512) isas.push_back(native::Isa::kAvx512);
  std::mt19937 rng(28);
  for (const Case& c : cases) {
    const Tensor x = Random8(c.xt, Shape(c.x), rng);
    const Tensor w = Random8(c.wt, Shape(c.w), rng);
    const Tensor x_zp = Random8(c.xt, Shape{}, rng);
    const Tensor w_zp = Random8(c.wt, c.per_channel ? Shape{c.w[0]} : Shape{}, rng);
    reference::WindowAttrs window;
    window.kernel_shape.assign(c.w.begin() + 2, c.w.end());
    window.strides = c.strides;
    window.dilations = c.dilations;
    window.pads = c.pads;
    Tensor expected;
    ASSERT_TRUE(
        reference::Conv(Shifted(x, x_zp), Shifted(w, w_zp), nullptr, window, c.group, expected)
            .ok());
    const Attributes attrs = {{"strides", IntsAttr(c.strides)},
                              {"dilations", IntsAttr(c.dilations)},
                              {"pads", IntsAttr(c.pads)},
                              {"group", IntAttr(c.group)}};
    const Tensor x_scale = MakeTensor<float>({}, {0.013f});
    const Tensor w_scale = MakeTensor<float>({}, {0.021f});
    const Tensor y_scale = MakeTensor<float>({}, {1.7f});
    const Tensor y_zp = MakeTensor<int8_t>({}, {-3});
    for (const native::Isa isa : isas) {
      native::SetMaxIsa(isa);
      SCOPED_TRACE(::testing::Message() << "x " << Shape(c.x).ToString() << " w "
                                        << Shape(c.w).ToString() << " " << native::IsaName(isa));
      absl::StatusOr<Tensor> conv = RunOnce("ConvInteger", 10, {&x, &w, &x_zp, &w_zp}, attrs);
      absl::StatusOr<Tensor> q = RunOnce(
          "QLinearConv", 10, {&x, &x_scale, &x_zp, &w, &w_scale, &w_zp, &y_scale, &y_zp}, attrs);
      native::SetMaxIsa(native::Isa::kAvx512);
      ASSERT_TRUE(conv.ok()) << conv.status();
      ASSERT_TRUE(q.ok()) << q.status();
      ASSERT_EQ(conv->shape(), expected.shape());
      ASSERT_EQ(q->shape(), expected.shape());
      ASSERT_EQ(q->dtype(), DataType::kInt8);
      for (int64_t i = 0; i < expected.NumElements(); ++i) {
        const double sum = expected.data<double>()[i];
        ASSERT_EQ(conv->data<int32_t>()[i], static_cast<int32_t>(sum)) << i;
        const double v = std::nearbyint(sum * static_cast<double>(0.013f) *
                                        static_cast<double>(0.021f) / static_cast<double>(1.7f)) -
                         3;
        ASSERT_EQ(q->data<int8_t>()[i], static_cast<int8_t>(std::min(std::max(v, -128.0), 127.0)))
            << i;
      }
    }
  }
}

// A zero y_scale (found by onnx_importer_fuzz on the node test's model run on zeros): sums of
// 10, -10 and 0 become +inf, -inf and NaN; the infinities saturate and NaN is the lowest value,
// as in QLinearMatMul and QuantizeLinear, instead of an undefined float-to-integer conversion.
TEST(IntConvTest, QLinearConvZeroOutputScaleSaturatesAndNanIsTheLowestValue) {
  // x [1, 1, 3] (zero point 10): shifted 0, 10, -10; w [1, 1, 1] = 1: sums 0, 10, -10.
  const Tensor x = MakeTensor<uint8_t>({1, 1, 3}, {10, 20, 0});
  const Tensor x_scale = MakeTensor<float>({}, {1.0f});
  const Tensor x_zp = MakeTensor<uint8_t>({}, {10});
  const Tensor w = MakeTensor<uint8_t>({1, 1, 1}, {1});
  const Tensor w_scale = MakeTensor<float>({}, {1.0f});
  const Tensor w_zp = MakeTensor<uint8_t>({}, {0});
  const Tensor y_scale = MakeTensor<float>({}, {0.0f});
  const Tensor y_zp_u8 = MakeTensor<uint8_t>({}, {7});
  const Tensor y_zp_s8 = MakeTensor<int8_t>({}, {0});
  absl::StatusOr<Tensor> u8 = RunOnce(
      "QLinearConv", 10, {&x, &x_scale, &x_zp, &w, &w_scale, &w_zp, &y_scale, &y_zp_u8}, {});
  ASSERT_TRUE(u8.ok()) << u8.status();
  ASSERT_EQ(u8->NumElements(), 3);
  EXPECT_EQ(u8->data<uint8_t>()[0], 0);    // NaN
  EXPECT_EQ(u8->data<uint8_t>()[1], 255);  // +inf
  EXPECT_EQ(u8->data<uint8_t>()[2], 0);    // -inf
  absl::StatusOr<Tensor> s8 = RunOnce(
      "QLinearConv", 10, {&x, &x_scale, &x_zp, &w, &w_scale, &w_zp, &y_scale, &y_zp_s8}, {});
  ASSERT_TRUE(s8.ok()) << s8.status();
  ASSERT_EQ(s8->NumElements(), 3);
  EXPECT_EQ(s8->data<int8_t>()[0], -128);
  EXPECT_EQ(s8->data<int8_t>()[1], 127);
  EXPECT_EQ(s8->data<int8_t>()[2], -128);
}

TEST(BatchNormTrainingTest, BatchStatisticsAndRunningUpdate) {
  std::mt19937 rng(9);
  for (DataType type : {DataType::kFloat32, DataType::kFloat64}) {
    const Tensor x = RandomTensor(type, Shape{3, 2, 4}, rng);
    const Tensor scale = RandomTensor(type, Shape{2}, rng);
    const Tensor bias = RandomTensor(type, Shape{2}, rng);
    const Tensor mean = RandomTensor(type, Shape{2}, rng);
    const Tensor var = RandomTensor(type, Shape{2}, rng, Range::kPositive);
    absl::StatusOr<std::vector<Tensor>> out =
        RunOnceOutputs("BatchNormalization", 15, {&x, &scale, &bias, &mean, &var},
                       {{"training_mode", IntAttr(1)},
                        {"momentum", FloatAttr(0.8f)},
                        {"epsilon", FloatAttr(0.01f)}},
                       3);
    ASSERT_TRUE(out.ok()) << out.status();
    auto at = [](const Tensor& t, int64_t i) {
      return t.dtype() == DataType::kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
    };
    for (int64_t c = 0; c < 2; ++c) {
      double m = 0, v = 0;
      for (int64_t n = 0; n < 3; ++n) {
        for (int64_t s = 0; s < 4; ++s) m += at(x, (n * 2 + c) * 4 + s) / 12;
      }
      for (int64_t n = 0; n < 3; ++n) {
        for (int64_t s = 0; s < 4; ++s) v += std::pow(at(x, (n * 2 + c) * 4 + s) - m, 2) / 12;
      }
      for (int64_t n = 0; n < 3; ++n) {
        for (int64_t s = 0; s < 4; ++s) {
          const int64_t i = (n * 2 + c) * 4 + s;
          EXPECT_NEAR(at((*out)[0], i),
                      at(scale, c) * (at(x, i) - m) / std::sqrt(v + 0.01) + at(bias, c), 1e-4);
        }
      }
      EXPECT_NEAR(at((*out)[1], c), at(mean, c) * 0.8 + m * 0.2, 1e-5);
      EXPECT_NEAR(at((*out)[2], c), at(var, c) * 0.8 + v * 0.2, 1e-5);
    }
  }
}

}  // namespace
}  // namespace loopserve::engine::testing
