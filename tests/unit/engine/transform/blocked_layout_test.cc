// The blocked-layout pass (engine/transform/blocked_layout.h) on small Conv graphs: where it
// keeps tensors blocked and where it puts the reorders, and (through Model::FromGraph, the whole
// pipeline) results against reference::Conv and the ops' definitions computed here, in the layout
// oneDNN's convolutions choose on this CPU (nChw16c or nhwc on AVX-512); the ctest
// blocked_layout_avx2 runs them again with oneDNN capped at AVX2 (nChw8c).

#include "engine/transform/blocked_layout.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/ir/graph.h"
#include "engine/kernels/dnnl/layout.h"
#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"

namespace loopserve::engine::transform {
namespace {

Attribute Ints(std::vector<int64_t> values) {
  Attribute a;
  a.type = Attribute::Type::kInts;
  a.ints = std::move(values);
  return a;
}

Attribute Int(int64_t value) {
  Attribute a;
  a.type = Attribute::Type::kInt;
  a.i = value;
  return a;
}

Attribute String(const std::string& value) {
  Attribute a;
  a.type = Attribute::Type::kString;
  a.s = value;
  return a;
}

Tensor Random(const Shape& shape, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DataType::kFloat32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i) p[i] = dist(rng);
  return t;
}

// A graph of Convs with constant weights, built together with its expected values (reference
// kernels and plain loops on the same inputs).
class ConvGraph {
 public:
  explicit ConvGraph(Shape x_shape) : g_(std::make_shared<Graph>()), x_(Random(x_shape, 1)) {
    g_->name = "blocked";
    ValueType t;
    t.dtype = DataType::kFloat32;
    t.dims = std::vector<int64_t>(x_shape.dims().begin(), x_shape.dims().end());
    const ValueId x = g_->AddValue("x", t);
    g_->inputs.push_back(x);
    values_.push_back({x, Copy(x_)});
  }

  ValueId x() const { return values_[0].first; }

  // Conv of `in` with random weights [m, C / group, k, k] and bias, pads k / 2.
  ValueId Conv(ValueId in, int64_t m, int64_t k, int64_t group = 1, int64_t stride = 1) {
    const Tensor& x = Expected(in);
    const Tensor w = Random(Shape{m, x.dim(1) / group, k, k}, ++seed_);
    const Tensor b = Random(Shape{m}, ++seed_);
    const int64_t p = k / 2;
    absl::flat_hash_map<std::string, Attribute> attrs = {
        {"pads", Ints({p, p, p, p})}, {"group", Int(group)}, {"strides", Ints({stride, stride})}};
    const ValueId out = Add("Conv", {in, Constant(w), Constant(b)}, std::move(attrs));
    reference::WindowAttrs window;
    window.pads = {p, p, p, p};
    window.strides = {stride, stride};
    Tensor want;
    EXPECT_TRUE(reference::Conv(x, w, &b, window, group, want).ok());
    values_.push_back({out, std::move(want)});
    return out;
  }

  // An elementwise op of `inputs` (same shapes) computed by `fn` per element.
  template <typename Fn>
  ValueId Elementwise(const std::string& op, std::vector<ValueId> inputs, Fn fn) {
    Tensor want = Copy(Expected(inputs[0]));
    for (int64_t i = 0; i < want.NumElements(); ++i) {
      const float a = Expected(inputs[0]).data<float>()[i];
      const float b = inputs.size() > 1 ? Expected(inputs[1]).data<float>()[i] : 0.0f;
      want.mutable_data<float>()[i] = fn(a, b);
    }
    const ValueId out = Add(op, std::move(inputs), {});
    values_.push_back({out, std::move(want)});
    return out;
  }

  ValueId Mul(ValueId in, const Tensor& constant) {
    const Tensor& x = Expected(in);
    Tensor want = Copy(x);
    const int64_t plane = x.dim(2) * x.dim(3);
    for (int64_t i = 0; i < want.NumElements(); ++i) {
      const int64_t c = (i / plane) % x.dim(1);
      want.mutable_data<float>()[i] *= constant.data<float>()[constant.NumElements() == 1 ? 0 : c];
    }
    const ValueId out = Add("Mul", {in, Constant(constant)}, {});
    values_.push_back({out, std::move(want)});
    return out;
  }

  ValueId ConcatChannels(ValueId a, ValueId b) {
    const Tensor& ta = Expected(a);
    const Tensor& tb = Expected(b);
    Tensor want(DataType::kFloat32, Shape{1, ta.dim(1) + tb.dim(1), ta.dim(2), ta.dim(3)});
    std::copy_n(ta.data<float>(), ta.NumElements(), want.mutable_data<float>());
    std::copy_n(tb.data<float>(), tb.NumElements(), want.mutable_data<float>() + ta.NumElements());
    const ValueId out = Add("Concat", {a, b}, {{"axis", Int(-3)}});
    values_.push_back({out, std::move(want)});
    return out;
  }

  ValueId GlobalAveragePool(ValueId in) {
    const Tensor& x = Expected(in);
    Tensor want(DataType::kFloat32, Shape{1, x.dim(1), 1, 1});
    const int64_t plane = x.dim(2) * x.dim(3);
    for (int64_t c = 0; c < x.dim(1); ++c) {
      double sum = 0;
      for (int64_t i = 0; i < plane; ++i) sum += x.data<float>()[c * plane + i];
      want.mutable_data<float>()[c] = static_cast<float>(sum / plane);
    }
    const ValueId out = Add("GlobalAveragePool", {in}, {});
    values_.push_back({out, std::move(want)});
    return out;
  }

  // x [1, C, H, W] times s [1, C, 1, 1] (a squeeze-excitation's scaling).
  ValueId Scale(ValueId x, ValueId s) {
    const Tensor& tx = Expected(x);
    const Tensor& ts = Expected(s);
    Tensor want = Copy(tx);
    const int64_t plane = tx.dim(2) * tx.dim(3);
    for (int64_t i = 0; i < want.NumElements(); ++i) {
      want.mutable_data<float>()[i] *= ts.data<float>()[i / plane];
    }
    const ValueId out = Add("Mul", {x, s}, {});
    values_.push_back({out, std::move(want)});
    return out;
  }

  // Nearest-neighbour upsampling by 2 (asymmetric coordinates, floor): out[y][x] = in[y/2][x/2].
  ValueId Upsample2(ValueId in) {
    const Tensor& x = Expected(in);
    const int64_t h = x.dim(2), w = x.dim(3);
    Tensor want(DataType::kFloat32, Shape{x.dim(0), x.dim(1), 2 * h, 2 * w});
    for (int64_t p = 0; p < x.dim(0) * x.dim(1); ++p) {
      for (int64_t y = 0; y < 2 * h; ++y) {
        for (int64_t i = 0; i < 2 * w; ++i) {
          want.mutable_data<float>()[(p * 2 * h + y) * 2 * w + i] =
              x.data<float>()[(p * h + y / 2) * w + i / 2];
        }
      }
    }
    Tensor scales(DataType::kFloat32, Shape{4});
    std::copy_n(std::vector<float>{1, 1, 2, 2}.data(), 4, scales.mutable_data<float>());
    const ValueId out = Add("Resize", {in, kNoValue, Constant(scales)},
                            {{"mode", String("nearest")},
                             {"coordinate_transformation_mode", String("asymmetric")},
                             {"nearest_mode", String("floor")}});
    values_.push_back({out, std::move(want)});
    return out;
  }

  void Output(ValueId v) { g_->outputs.push_back(v); }

  // The pass alone on a copy of the graph: the rewritten graph and its log.
  std::vector<std::string> RunPass(Graph& copy) const {
    copy = *g_;
    TransformContext context;
    const Graph* g = &copy;
    context.find_constant = [g](ValueId id) -> const Tensor* {
      for (const auto& [value, tensor] : g->constants) {
        if (value == id) return tensor.get();
      }
      return nullptr;
    };
    std::vector<std::string> log;
    EXPECT_TRUE(BlockedLayoutPass().Run(copy, context, log).ok());
    return log;
  }

  // Runs the model (every pass) at `threads` and compares each output with its expected values.
  void CheckOutputs(int threads) const {
    auto model = Model::FromGraph(g_);
    ASSERT_TRUE(model.ok()) << model.status();
    std::vector<Value> feed;
    feed.push_back(Value(Tensor::ViewOf(x_)));
    SetIntraOpThreads(threads);
    RunStats stats;
    auto out = (*model)->Run(std::move(feed), RunOptions(), &stats);
    SetIntraOpThreads(0);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(stats.reference_steps, 0);
    ASSERT_EQ(out->size(), g_->outputs.size());
    for (size_t k = 0; k < g_->outputs.size(); ++k) {
      const Tensor& got = (*out)[k].tensor();
      const Tensor& want = Expected(g_->outputs[k]);
      ASSERT_EQ(got.shape(), want.shape()) << "output " << k;
      for (int64_t i = 0; i < got.NumElements(); ++i) {
        const float w = want.data<float>()[i];
        ASSERT_NEAR(got.data<float>()[i], w, 1e-4f * (1.0f + std::abs(w)))
            << "output " << k << " element " << i;
      }
    }
  }

 private:
  static Tensor Copy(const Tensor& t) {
    Tensor c;
    c.CopyFrom(t);
    return c;
  }
  ValueId Constant(const Tensor& value) {
    auto t = std::make_shared<Tensor>();
    t->CopyFrom(value);
    const ValueId v = g_->AddValue("c" + std::to_string(g_->values.size()));
    g_->constants.push_back({v, t});
    return v;
  }
  ValueId Add(const std::string& op, std::vector<ValueId> inputs,
              absl::flat_hash_map<std::string, Attribute> attrs) {
    Node n;
    n.op_type = op;
    n.name = op + "_" + std::to_string(g_->nodes.size());
    n.opset = 13;
    n.inputs = std::move(inputs);
    n.outputs = {g_->AddValue(n.name + "_out")};
    n.attributes = std::move(attrs);
    g_->nodes.push_back(std::move(n));
    return g_->nodes.back().outputs[0];
  }
  const Tensor& Expected(ValueId v) const {
    for (const auto& [id, t] : values_) {
      if (id == v) return t;
    }
    ADD_FAILURE() << "no expected value for " << v;
    return x_;
  }

  std::shared_ptr<Graph> g_;
  Tensor x_;
  std::vector<std::pair<ValueId, Tensor>> values_;
  unsigned seed_ = 10;
};

const Node* FindNode(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

int64_t IntAttr(const Node& node, const std::string& name) {
  const Attribute* a = node.FindAttribute(name);
  return a == nullptr ? -1 : a->i;
}

int Count(const Graph& g, const std::string& op_type) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(),
                                        [&](const Node& n) { return n.op_type == op_type; }));
}

// Conv -> Relu -> Conv -> depthwise Conv: the first Conv reorders its plain input in, the last
// its result out; everything between stays blocked, with no other reorder.
TEST(BlockedLayoutTest, ChainGetsOneReorderInAndOut) {
  ConvGraph b(Shape{1, 16, 9, 7});
  const ValueId c0 = b.Conv(b.x(), 32, 3);
  const ValueId r = b.Elementwise("Relu", {c0}, [](float a, float) { return std::max(a, 0.0f); });
  const ValueId c1 = b.Conv(r, 32, 3);
  b.Output(b.Conv(c1, 32, 3, /*group=*/32));
  Graph g;
  const std::vector<std::string> log = b.RunPass(g);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("4 nodes keep"), std::string::npos) << log[0];
  EXPECT_NE(log[0].find("1 Conv inputs in, 1 Conv results out, 0 _BlockedToPlain"),
            std::string::npos)
      << log[0];
  EXPECT_EQ(Count(g, kBlockedToPlainOp), 0);
  const Node* first = FindNode(g, "Conv_0");
  const Node* last = FindNode(g, "Conv_3");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(IntAttr(*first, "_blocked_src"), 0);
  EXPECT_EQ(IntAttr(*first, "_blocked_dst"), 1);
  EXPECT_EQ(IntAttr(*FindNode(g, "Conv_2"), "_blocked_src"), 1);
  EXPECT_EQ(IntAttr(*FindNode(g, "Conv_2"), "_blocked_dst"), 1);
  EXPECT_EQ(IntAttr(*last, "_blocked_src"), 1);
  EXPECT_EQ(IntAttr(*last, "_blocked_dst"), 0);
  EXPECT_EQ(g.ValueName(FindNode(g, "Relu_1")->inputs[0]), "Conv_0_out/blocked");
  EXPECT_EQ(g.outputs[0], last->outputs[0]);  // the graph's output is written plain
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    b.CheckOutputs(threads);
  }
}

// A blocked value that a plain op (Exp) reads and that is also a graph output gets one
// _BlockedToPlain, which writes the original value; the Conv after it still reads it blocked.
TEST(BlockedLayoutTest, BranchReadByPlainOpGetsReorder) {
  ConvGraph b(Shape{1, 3, 8, 8});
  const ValueId c0 = b.Conv(b.x(), 16, 3);
  const ValueId c1 = b.Conv(c0, 16, 3, /*group=*/16);
  const ValueId c2 = b.Conv(c1, 32, 3);
  b.Output(b.Elementwise("Exp", {c1}, [](float a, float) { return std::exp(a); }));
  b.Output(c1);
  b.Output(c2);
  Graph g;
  ASSERT_EQ(b.RunPass(g).size(), 1u);
  ASSERT_EQ(Count(g, kBlockedToPlainOp), 1);
  const auto reorder = std::find_if(g.nodes.begin(), g.nodes.end(),
                                    [](const Node& n) { return n.op_type == kBlockedToPlainOp; });
  EXPECT_EQ(reorder->outputs[0], c1);
  EXPECT_EQ(g.ValueName(reorder->inputs[0]), "Conv_1_out/blocked");
  EXPECT_EQ(FindNode(g, "Exp_3")->inputs[0], c1);
  EXPECT_EQ(FindNode(g, "Conv_2")->inputs[0], reorder->inputs[0]);
  b.CheckOutputs(1);
}

// Two pointwise Convs: on their own neither reorders (plain GEMMs), so a chain (a reorder in and
// one out) would only add work: the pass leaves them alone.
TEST(BlockedLayoutTest, PointwisePairStaysPlain) {
  ConvGraph b(Shape{1, 16, 6, 6});
  b.Output(b.Conv(b.Conv(b.x(), 32, 1), 16, 1));
  Graph g;
  EXPECT_TRUE(b.RunPass(g).empty());
  b.CheckOutputs(1);
}

// A residual Add of two blocked values, a Concat of blocked values along the channels (axis -3)
// and a Mul by a one-element constant run on the blocked tensors; a Mul by a per-channel constant
// does not (its operand is plain), so its input is reordered out and the next Conv's back in.
TEST(BlockedLayoutTest, ElementwiseAndConcatStayBlocked) {
  ConvGraph b(Shape{1, 16, 7, 5});
  const ValueId c0 = b.Conv(b.x(), 16, 3);
  const ValueId c1 = b.Conv(c0, 16, 3, /*group=*/16);
  const ValueId sum = b.Elementwise("Add", {c0, c1}, [](float x, float y) { return x + y; });
  const ValueId cat = b.ConcatChannels(sum, c1);
  const ValueId scaled = b.Mul(cat, Random(Shape{1}, 5));
  const ValueId c2 = b.Conv(scaled, 32, 3);
  const ValueId per_channel = b.Mul(c2, Random(Shape{32, 1, 1}, 6));
  b.Output(b.Conv(per_channel, 16, 3));
  Graph g;
  ASSERT_EQ(b.RunPass(g).size(), 1u);
  EXPECT_EQ(g.ValueName(FindNode(g, "Add_2")->inputs[0]), "Conv_0_out/blocked");
  EXPECT_EQ(g.ValueName(FindNode(g, "Concat_3")->inputs[1]), "Conv_1_out/blocked");
  EXPECT_EQ(IntAttr(*FindNode(g, "Concat_3"), "axis"), ChainConcatAxis());
  EXPECT_EQ(g.ValueName(FindNode(g, "Mul_4")->outputs[0]), "Mul_4_out/blocked");
  EXPECT_EQ(IntAttr(*FindNode(g, "Conv_5"), "_blocked_src"), 1);
  EXPECT_EQ(IntAttr(*FindNode(g, "Conv_5"), "_blocked_dst"), 0);
  EXPECT_EQ(FindNode(g, "Mul_6")->inputs[0], FindNode(g, "Conv_5")->outputs[0]);
  EXPECT_EQ(Count(g, kBlockedToPlainOp), 0);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    b.CheckOutputs(threads);
  }
}

// A squeeze-excitation block: GlobalAveragePool reads and writes the chain's layout, the
// scaling Mul of two blocked values broadcasts over the spatial dims as the plain one does, and
// no value leaves the chain.
TEST(BlockedLayoutTest, SqueezeExcitationStaysBlocked) {
  ConvGraph b(Shape{1, 16, 6, 9});
  const ValueId c0 = b.Conv(b.x(), 32, 3);
  const ValueId squeezed = b.Conv(b.GlobalAveragePool(c0), 16, 1);
  const ValueId gate = b.Elementwise("Sigmoid", {b.Conv(squeezed, 32, 1)},
                                     [](float a, float) { return 1.0f / (1.0f + std::exp(-a)); });
  b.Output(b.Conv(b.Scale(c0, gate), 16, 3));
  Graph g;
  ASSERT_EQ(b.RunPass(g).size(), 1u);
  EXPECT_EQ(IntAttr(*FindNode(g, "GlobalAveragePool_1"), "_blocked"), 1);
  EXPECT_EQ(g.ValueName(FindNode(g, "GlobalAveragePool_1")->inputs[0]), "Conv_0_out/blocked");
  EXPECT_EQ(g.ValueName(FindNode(g, "Mul_5")->inputs[1]), "Sigmoid_4_out/blocked");
  EXPECT_EQ(Count(g, kBlockedToPlainOp), 0);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    b.CheckOutputs(threads);
  }
}

// A feature pyramid's top-down step: a Resize of a chain value (run plain, so its input leaves
// the chain) added to a chain value. In the nhwc layout the upsampled operand joins the chain
// through one _PlainToBlocked and the Add and the Conv after it stay in the chain; in a blocked
// layout (channels unknown to the pass) the Add runs plain.
TEST(BlockedLayoutTest, UpsampledBranchJoinsTheChain) {
  ConvGraph b(Shape{1, 16, 8, 6});
  const ValueId c0 = b.Conv(b.x(), 16, 3);
  const ValueId up = b.Upsample2(b.Conv(c0, 16, 3, /*group=*/1, /*stride=*/2));
  const ValueId sum = b.Elementwise("Add", {c0, up}, [](float x, float y) { return x + y; });
  b.Output(b.Conv(sum, 16, 3));
  Graph g;
  ASSERT_EQ(b.RunPass(g).size(), 1u);
  if (ActivationLayout() == ChainLayout::kNhwc) {
    EXPECT_EQ(Count(g, kPlainToBlockedOp), 1);
    EXPECT_EQ(g.ValueName(FindNode(g, "Add_3")->inputs[1]), "Resize_2_out/blocked");
    EXPECT_EQ(IntAttr(*FindNode(g, "Conv_4"), "_blocked_src"), 1);
  } else {
    EXPECT_EQ(Count(g, kPlainToBlockedOp), 0);
    EXPECT_EQ(FindNode(g, "Add_3")->inputs[1], up);
  }
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    b.CheckOutputs(threads);
  }
}

}  // namespace
}  // namespace loopserve::engine::transform
