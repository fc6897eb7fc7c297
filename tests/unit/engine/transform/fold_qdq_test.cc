// fold_qdq (engine/transform/fold_qdq): QDQ-format MatMul, Gemm and Conv (DequantizeLinear in
// front of each quantized operand, as ONNX Runtime's quantize_static writes them) become integer
// products; the whole pipeline's result is checked against the QDQ graph's definition computed
// here in double precision (QuantizeLinear in float32 as the ONNX spec rounds it, then the
// dequantized operands' float product), and the forms whose scales cannot leave the sum are left
// alone.

#include "engine/transform/fold_qdq.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/ir/graph.h"
#include "gtest/gtest.h"

namespace loopserve::engine::transform {
namespace {

class QdqGraph {
 public:
  QdqGraph() : g_(std::make_shared<Graph>()) { g_->name = "qdq"; }

  ValueId Input(const std::string& name) {
    ValueType t;
    t.dtype = DataType::kFloat32;
    const ValueId v = g_->AddValue(name, t);
    g_->inputs.push_back(v);
    return v;
  }
  ValueId Constant(const std::string& name, const Tensor& value) {
    auto t = std::make_shared<Tensor>();
    t->CopyFrom(value);
    const ValueId v = g_->AddValue(name);
    g_->constants.push_back({v, t});
    return v;
  }
  ValueId Op(const std::string& op, std::vector<ValueId> inputs,
             absl::flat_hash_map<std::string, Attribute> attributes = {}) {
    Node n;
    n.op_type = op;
    n.name = op + "_" + std::to_string(g_->nodes.size());
    n.opset = 13;
    n.inputs = std::move(inputs);
    const ValueId out = g_->AddValue(n.name + "_out");
    n.outputs = {out};
    n.attributes = std::move(attributes);
    g_->nodes.push_back(std::move(n));
    return out;
  }
  void Output(ValueId v) { g_->outputs.push_back(v); }

  Graph& graph() { return *g_; }
  std::shared_ptr<Graph> shared() { return g_; }

  // Runs the pass alone over a copy; returns the copy's op types.
  std::vector<std::string> FoldedOps(std::vector<std::string>* log = nullptr) const {
    Graph copy = *g_;
    TransformContext context;
    context.find_constant = [&copy](ValueId id) -> const Tensor* {
      for (const auto& [value, tensor] : copy.constants) {
        if (value == id) return tensor.get();
      }
      return nullptr;
    };
    std::vector<std::string> lines;
    EXPECT_TRUE(FoldQdqPass().Run(copy, context, lines).ok());
    if (log != nullptr) *log = lines;
    std::vector<std::string> ops;
    for (const Node& n : copy.nodes) ops.push_back(n.op_type);
    return ops;
  }

 private:
  std::shared_ptr<Graph> g_;
};

Attribute IntAttr(int64_t v) {
  Attribute a;
  a.type = Attribute::Type::kInt;
  a.i = v;
  return a;
}
Attribute FloatAttr(float v) {
  Attribute a;
  a.type = Attribute::Type::kFloat;
  a.f = v;
  return a;
}
Attribute IntsAttr(std::vector<int64_t> v) {
  Attribute a;
  a.type = Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}

Tensor RandomFloats(const Shape& shape, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DataType::kFloat32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

Tensor RandomInt8(const Shape& shape, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(-127, 127);
  Tensor t(DataType::kInt8, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    t.mutable_data<int8_t>()[i] = static_cast<int8_t>(dist(rng));
  }
  return t;
}

template <typename T>
Tensor Scalar(DataType dtype, T value) {
  Tensor t(dtype, Shape{});
  t.mutable_data<T>()[0] = value;
  return t;
}

// QuantizeLinear to uint8 then DequantizeLinear, per tensor, as the ONNX spec computes them.
std::vector<double> QuantizeDequantize(const Tensor& x, float scale, uint8_t zp) {
  std::vector<double> out(x.NumElements());
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    const float q = std::nearbyint(x.data<float>()[i] / scale) + zp;
    const double saturated = std::min(255.0f, std::max(0.0f, q));
    out[i] = (saturated - zp) * static_cast<double>(scale);
  }
  return out;
}

Tensor RunModel(std::shared_ptr<Graph> graph, const Tensor& input) {
  auto model = Model::FromGraph(std::move(graph));
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return Tensor();
  std::vector<Value> feed;
  feed.push_back(Value(Tensor::ViewOf(input)));
  RunStats stats;
  auto out = (*model)->Run(std::move(feed), RunOptions(), &stats);
  EXPECT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(stats.reference_steps, 0);
  Tensor result;
  if (out.ok()) result.CopyFrom((*out)[0].tensor());
  return result;
}

void ExpectNear(const Tensor& got, const std::vector<double>& want) {
  ASSERT_EQ(got.NumElements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got.data<float>()[i], want[i], 1e-5 * (1.0 + std::abs(want[i]))) << i;
  }
}

constexpr float kXScale = 0.02f;
constexpr uint8_t kXZeroPoint = 120;

// x -> QuantizeLinear -> DequantizeLinear: the activation side quantize_static writes.
ValueId QdqActivation(QdqGraph& b, ValueId x) {
  const ValueId s = b.Constant("x_scale", Scalar(DataType::kFloat32, kXScale));
  const ValueId z = b.Constant("x_zp", Scalar<uint8_t>(DataType::kUint8, kXZeroPoint));
  return b.Op("DequantizeLinear", {b.Op("QuantizeLinear", {x, s, z}), s, z});
}

// MatMul of a QDQ activation [m, k] by int8 weights [k, n] with per-column scales (axis 1) and
// zero points: MatMulInteger + Cast + Mul, equal to the dequantized float product.
TEST(FoldQdqTest, MatMulWithPerColumnWeightsRunsAsIntegerProduct) {
  std::mt19937 rng(3);
  const int64_t m = 5, k = 70, n = 24;
  QdqGraph b;
  const ValueId x = b.Input("x");
  const Tensor wq = RandomInt8(Shape{k, n}, rng);
  const Tensor ws = RandomFloats(Shape{n}, rng, 0.001f, 0.01f);
  Tensor wz(DataType::kInt8, Shape{n});
  for (int64_t j = 0; j < n; ++j) wz.mutable_data<int8_t>()[j] = static_cast<int8_t>(j % 5 - 2);
  const ValueId w =
      b.Op("DequantizeLinear", {b.Constant("wq", wq), b.Constant("ws", ws), b.Constant("wz", wz)},
           {{"axis", IntAttr(1)}});
  b.Output(b.Op("MatMul", {QdqActivation(b, x), w}));

  std::vector<std::string> log;
  EXPECT_EQ(b.FoldedOps(&log),
            (std::vector<std::string>{"QuantizeLinear", "MatMulInteger", "Cast", "Mul"}));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("fold_qdq: DequantizeLinear"), std::string::npos) << log[0];

  const Tensor input = RandomFloats(Shape{m, k}, rng, -2.0f, 2.0f);
  const std::vector<double> xd = QuantizeDequantize(input, kXScale, kXZeroPoint);
  std::vector<double> want(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) {
        const double wd = (wq.data<int8_t>()[p * n + j] - wz.data<int8_t>()[j]) *
                          static_cast<double>(ws.data<float>()[j]);
        want[i * n + j] += xd[i * k + p] * wd;
      }
    }
  }
  ExpectNear(RunModel(b.shared(), input), want);
}

// Gemm(transB = 1, alpha 0.5) with a quantized int32 bias, as quantize_static writes a Linear
// layer: the weights transposed once, alpha in the scale, the bias added after.
TEST(FoldQdqTest, GemmWithTransposedWeightsAndQuantizedBias) {
  std::mt19937 rng(4);
  const int64_t m = 3, k = 33, n = 17;
  QdqGraph b;
  const ValueId x = b.Input("x");
  const Tensor wq = RandomInt8(Shape{n, k}, rng);
  const float w_scale = 0.004f;
  const ValueId w =
      b.Op("DequantizeLinear",
           {b.Constant("wq", wq), b.Constant("ws", Scalar(DataType::kFloat32, w_scale)),
            b.Constant("wz", Scalar<int8_t>(DataType::kInt8, 0))});
  Tensor bias_q(DataType::kInt32, Shape{n});
  for (int64_t j = 0; j < n; ++j)
    bias_q.mutable_data<int32_t>()[j] = static_cast<int32_t>(j * 37 - 300);
  const float bias_scale = kXScale * w_scale;
  const ValueId bias =
      b.Op("DequantizeLinear",
           {b.Constant("bq", bias_q), b.Constant("bs", Scalar(DataType::kFloat32, bias_scale))});
  b.Output(b.Op("Gemm", {QdqActivation(b, x), w, bias},
                {{"transB", IntAttr(1)}, {"alpha", FloatAttr(0.5f)}}));

  EXPECT_EQ(b.FoldedOps(), (std::vector<std::string>{"DequantizeLinear", "QuantizeLinear",
                                                     "MatMulInteger", "Cast", "Mul", "Add"}));

  const Tensor input = RandomFloats(Shape{m, k}, rng, -2.0f, 2.0f);
  const std::vector<double> xd = QuantizeDequantize(input, kXScale, kXZeroPoint);
  std::vector<double> want(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += xd[i * k + p] * wq.data<int8_t>()[j * k + p] * w_scale;
      want[i * n + j] = 0.5 * sum + bias_q.data<int32_t>()[j] * static_cast<double>(bias_scale);
    }
  }
  ExpectNear(RunModel(b.shared(), input), want);
}

// Conv with per-output-channel int8 weights (axis 0), pads and stride 2, and a quantized bias:
// ConvInteger + Cast + Mul + Add, equal to the dequantized float convolution.
TEST(FoldQdqTest, ConvWithPerChannelWeightsRunsAsConvInteger) {
  std::mt19937 rng(5);
  const int64_t c = 3, h = 9, wd = 8, mo = 4, kh = 3, kw = 3;
  QdqGraph b;
  const ValueId x = b.Input("x");
  const Tensor wq = RandomInt8(Shape{mo, c, kh, kw}, rng);
  const Tensor ws = RandomFloats(Shape{mo}, rng, 0.002f, 0.02f);
  const ValueId w = b.Op("DequantizeLinear", {b.Constant("wq", wq), b.Constant("ws", ws)},
                         {{"axis", IntAttr(0)}});
  Tensor bias_q(DataType::kInt32, Shape{mo});
  Tensor bias_s(DataType::kFloat32, Shape{mo});
  for (int64_t o = 0; o < mo; ++o) {
    bias_q.mutable_data<int32_t>()[o] = static_cast<int32_t>(o * 1000 - 1500);
    bias_s.mutable_data<float>()[o] = kXScale * ws.data<float>()[o];
  }
  const ValueId bias =
      b.Op("DequantizeLinear", {b.Constant("bq", bias_q), b.Constant("bs", bias_s)},
           {{"axis", IntAttr(0)}});
  b.Output(b.Op("Conv", {QdqActivation(b, x), w, bias},
                {{"pads", IntsAttr({1, 1, 1, 1})}, {"strides", IntsAttr({2, 2})}}));

  EXPECT_EQ(b.FoldedOps(),
            (std::vector<std::string>{"QuantizeLinear", "ConvInteger", "Cast", "Mul", "Add"}));

  const Tensor input = RandomFloats(Shape{1, c, h, wd}, rng, -2.0f, 2.0f);
  const std::vector<double> xd = QuantizeDequantize(input, kXScale, kXZeroPoint);
  const int64_t oh = (h + 2 - kh) / 2 + 1, ow = (wd + 2 - kw) / 2 + 1;
  std::vector<double> want(mo * oh * ow);
  for (int64_t o = 0; o < mo; ++o) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t xo = 0; xo < ow; ++xo) {
        double sum = bias_q.data<int32_t>()[o] * static_cast<double>(bias_s.data<float>()[o]);
        for (int64_t ci = 0; ci < c; ++ci) {
          for (int64_t i = 0; i < kh; ++i) {
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t yi = y * 2 + i - 1, xi = xo * 2 + j - 1;
              if (yi < 0 || yi >= h || xi < 0 || xi >= wd) continue;
              sum += xd[(ci * h + yi) * wd + xi] *
                     wq.data<int8_t>()[((o * c + ci) * kh + i) * kw + j] * ws.data<float>()[o];
            }
          }
        }
        want[(o * oh + y) * ow + xo] = sum;
      }
    }
  }
  ExpectNear(RunModel(b.shared(), input), want);
}

// Scales that do not factor out of the sum, and operands that are not 8-bit, stay as they are.
TEST(FoldQdqTest, ScalesAlongTheSumAndWideOperandsAreLeftAlone) {
  std::mt19937 rng(6);
  const int64_t k = 8, n = 6;
  {  // b's scale per row (axis 0 of [k, n]): varies along the sum.
    QdqGraph b;
    const ValueId w = b.Op("DequantizeLinear",
                           {b.Constant("wq", RandomInt8(Shape{k, n}, rng)),
                            b.Constant("ws", RandomFloats(Shape{k}, rng, 0.01f, 0.02f))},
                           {{"axis", IntAttr(0)}});
    b.Output(b.Op("MatMul", {QdqActivation(b, b.Input("x")), w}));
    EXPECT_EQ(b.FoldedOps(), (std::vector<std::string>{"DequantizeLinear", "QuantizeLinear",
                                                       "DequantizeLinear", "MatMul"}));
  }
  {  // a per channel.
    QdqGraph b;
    const ValueId s = b.Constant("s", RandomFloats(Shape{k}, rng, 0.01f, 0.02f));
    const ValueId a = b.Op("DequantizeLinear", {b.Op("QuantizeLinear", {b.Input("x"), s}), s},
                           {{"axis", IntAttr(1)}});
    const ValueId w =
        b.Op("DequantizeLinear", {b.Constant("wq", RandomInt8(Shape{k, n}, rng)),
                                  b.Constant("ws", Scalar(DataType::kFloat32, 0.01f))});
    b.Output(b.Op("MatMul", {a, w}));
    EXPECT_EQ(b.FoldedOps(), (std::vector<std::string>{"QuantizeLinear", "DequantizeLinear",
                                                       "DequantizeLinear", "MatMul"}));
  }
  {  // int32 weights.
    QdqGraph b;
    Tensor wq(DataType::kInt32, Shape{k, n});
    for (int64_t i = 0; i < k * n; ++i) wq.mutable_data<int32_t>()[i] = static_cast<int32_t>(i);
    const ValueId w =
        b.Op("DequantizeLinear",
             {b.Constant("wq", wq), b.Constant("ws", Scalar(DataType::kFloat32, 0.01f))});
    b.Output(b.Op("MatMul", {QdqActivation(b, b.Input("x")), w}));
    EXPECT_EQ(b.FoldedOps(), (std::vector<std::string>{"DequantizeLinear", "QuantizeLinear",
                                                       "DequantizeLinear", "MatMul"}));
  }
}

// A subgraph (a Loop body, an If branch) is folded too, its weights read through its captures:
// the pipeline hoists and folds a body's weight DequantizeLinear before the body's own
// optimization would see it.
TEST(FoldQdqTest, SubgraphReadingCapturedWeightsIsFolded) {
  std::mt19937 rng(7);
  QdqGraph outer;
  const ValueId wq_outer = outer.Constant("wq", RandomInt8(Shape{8, 4}, rng));
  auto body = std::make_shared<Graph>();
  body->name = "body";
  ValueType f32;
  f32.dtype = DataType::kFloat32;
  const ValueId h = body->AddValue("h", f32);
  body->inputs = {h};
  const ValueId wq_inner = body->AddValue("wq");
  body->captures.push_back({wq_inner, wq_outer});
  auto constant = [&](const std::string& name, Tensor t) {
    const ValueId v = body->AddValue(name);
    body->constants.push_back({v, std::make_shared<Tensor>(std::move(t))});
    return v;
  };
  const ValueId s = constant("s", Scalar(DataType::kFloat32, 0.05f));
  const ValueId ws = constant("ws", Scalar(DataType::kFloat32, 0.01f));
  auto node = [&](const std::string& op, std::vector<ValueId> in) {
    Node n;
    n.op_type = n.name = op;
    n.opset = 13;
    n.inputs = std::move(in);
    n.outputs = {body->AddValue(op + "_out")};
    body->nodes.push_back(n);
    return n.outputs[0];
  };
  const ValueId a = node("DequantizeLinear", {node("QuantizeLinear", {h, s}), s});
  body->outputs = {node("MatMul", {a, node("DequantizeLinear", {wq_inner, ws})})};
  Attribute branch;
  branch.type = Attribute::Type::kGraph;
  branch.graph = body;
  outer.Output(outer.Op("If", {outer.Input("c")}, {{"then_branch", branch}}));

  std::vector<std::string> log;
  outer.FoldedOps(&log);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("-> MatMulInteger + Cast + Mul"), std::string::npos) << log[0];
}

}  // namespace
}  // namespace loopserve::engine::transform
