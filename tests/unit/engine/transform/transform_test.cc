// Each graph optimizer pass (engine/transform/) on a small graph: the nodes it produces, the
// patterns it must leave alone, and (through Model::FromGraph, which runs the whole pipeline)
// results against values computed here in double precision from the ops' definitions.

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/ir/graph.h"
#include "engine/transform/elide_loop_identities.h"
#include "engine/transform/fuse_elementwise.h"
#include "engine/transform/fuse_gelu.h"
#include "engine/transform/fuse_layer_norm.h"
#include "engine/transform/fuse_matmul.h"
#include "gtest/gtest.h"

namespace loopserve::engine::transform {
namespace {

// A graph under construction with helpers for float values, constants and nodes.
class Builder {
 public:
  Builder() : g_(std::make_shared<Graph>()) { g_->name = "test"; }

  ValueId Input(const std::string& name, std::vector<int64_t> dims) {
    ValueType t;
    t.dtype = DataType::kFloat32;
    t.dims = std::move(dims);
    const ValueId v = g_->AddValue(name, t);
    g_->inputs.push_back(v);
    return v;
  }
  ValueId Scalar(const std::string& name, float value) {
    auto t = std::make_shared<Tensor>();
    t->Resize(DataType::kFloat32, Shape{1});
    t->mutable_data<float>()[0] = value;
    const ValueId v = g_->AddValue(name);
    g_->constants.push_back({v, t});
    return v;
  }
  ValueId Constant(const std::string& name, const Tensor& value) {
    auto t = std::make_shared<Tensor>();
    t->CopyFrom(value);
    const ValueId v = g_->AddValue(name);
    g_->constants.push_back({v, t});
    return v;
  }
  ValueId Op(const std::string& op, std::vector<ValueId> inputs, int opset = 13,
             absl::flat_hash_map<std::string, Attribute> attributes = {}) {
    Node n;
    n.op_type = op;
    n.name = op + "_" + std::to_string(g_->nodes.size());
    n.opset = opset;
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

  // The pass context: constants of this graph.
  TransformContext Context() const {
    TransformContext c;
    const Graph* g = g_.get();
    c.find_constant = [g](ValueId id) -> const Tensor* {
      for (const auto& [value, tensor] : g->constants) {
        if (value == id) return tensor.get();
      }
      return nullptr;
    };
    return c;
  }

 private:
  std::shared_ptr<Graph> g_;
};

Attribute Ints(std::vector<int64_t> values) {
  Attribute a;
  a.type = Attribute::Type::kInts;
  a.ints = std::move(values);
  return a;
}

std::vector<std::string> RunPass(const Pass& pass, Builder& b) {
  std::vector<std::string> log;
  const absl::Status status = pass.Run(b.graph(), b.Context(), log);
  EXPECT_TRUE(status.ok()) << status;
  return log;
}

std::vector<std::string> OpTypes(const Graph& g) {
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) ops.push_back(n.op_type);
  return ops;
}

Tensor Random(const Shape& shape, unsigned seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DataType::kFloat32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i) p[i] = dist(rng);
  return t;
}

// Runs `graph` (the whole pipeline applies) on `inputs` and returns output 0; checks that no step
// ran on a reference kernel.
Tensor RunModel(std::shared_ptr<Graph> graph, const std::vector<const Tensor*>& inputs) {
  auto model = Model::FromGraph(std::move(graph));
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return Tensor();
  std::vector<Value> feed;
  for (const Tensor* t : inputs) feed.push_back(Value(Tensor::ViewOf(*t)));
  RunStats stats;
  auto out = (*model)->Run(std::move(feed), RunOptions(), &stats);
  EXPECT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(stats.reference_steps, 0);
  Tensor result;
  if (out.ok()) result.CopyFrom((*out)[0].tensor());
  return result;
}

TEST(FuseElementwiseTest, ChainWithBroadcastingBecomesOneNode) {
  Builder b;
  const ValueId x = b.Input("x", {2, 3, 4});
  const ValueId bias = b.Input("bias", {4});
  const ValueId scale = b.Input("scale", {2, 1, 1});
  const ValueId s = b.Op("Add", {x, bias});
  const ValueId m = b.Op("Mul", {scale, s});  // the chain value second
  const ValueId y = b.Op("Sigmoid", {m});
  const ValueId z = b.Op("Sub", {b.Scalar("one", 1.0f), y});
  b.Output(z);
  const std::vector<std::string> log = RunPass(FuseElementwisePass(), b);
  ASSERT_EQ(log.size(), 1u);
  ASSERT_EQ(OpTypes(b.graph()), std::vector<std::string>{kElementwiseOp});
  const Node& fused = b.graph().nodes[0];
  ASSERT_NE(fused.fusion, nullptr);
  ASSERT_EQ(fused.fusion->post_ops.size(), 4u);
  EXPECT_EQ(fused.fusion->post_ops[1].op, ArithOp::kMul);
  EXPECT_TRUE(fused.fusion->post_ops[1].input_first);
  EXPECT_EQ(fused.fusion->post_ops[2].fn, EltwiseFn::kSigmoid);
  EXPECT_TRUE(fused.fusion->post_ops[3].input_first);  // 1 - value
  EXPECT_EQ(fused.outputs[0], z);

  // Numerics through the whole pipeline.
  Builder b2;
  const ValueId x2 = b2.Input("x", {2, 3, 4});
  const ValueId bias2 = b2.Input("bias", {4});
  const ValueId scale2 = b2.Input("scale", {2, 1, 1});
  b2.Output(b2.Op("Sub", {b2.Scalar("one", 1.0f),
                          b2.Op("Sigmoid", {b2.Op("Mul", {scale2, b2.Op("Add", {x2, bias2})})})}));
  const Tensor tx = Random(Shape{2, 3, 4}, 1), tb = Random(Shape{4}, 2),
               ts = Random(Shape{2, 1, 1}, 3);
  const Tensor got = RunModel(b2.shared(), {&tx, &tb, &ts});
  ASSERT_EQ(got.shape(), (Shape{2, 3, 4}));
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 12; ++j) {
      const double v = ts.data<float>()[i] * (static_cast<double>(tx.data<float>()[i * 12 + j]) +
                                              tb.data<float>()[j % 4]);
      ASSERT_NEAR(got.data<float>()[i * 12 + j], 1 - 1 / (1 + std::exp(-v)), 1e-6);
    }
  }
}

TEST(FuseElementwiseTest, ValueWithTwoReadersEndsTheChain) {
  Builder b;
  const ValueId x = b.Input("x", {8});
  const ValueId t = b.Op("Tanh", {x});
  const ValueId e = b.Op("Exp", {t});
  const ValueId n = b.Op("Neg", {t});  // t is read twice
  b.Output(e);
  b.Output(n);
  RunPass(FuseElementwisePass(), b);
  EXPECT_EQ(OpTypes(b.graph()), (std::vector<std::string>{"Tanh", "Exp", "Neg"}));
}

TEST(FuseMatMulTest, RnnCellBecomesOneFusedProduct) {
  Builder b;
  const ValueId x = b.Input("x", {2, 8});
  const ValueId h = b.Input("h", {2, 8});
  const ValueId w = b.Input("w", {8, 8});
  const ValueId u = b.Input("u", {8, 8});
  const ValueId bias = b.Input("bias", {8});
  const ValueId xw = b.Op("MatMul", {x, w});
  const ValueId hu = b.Op("MatMul", {h, u});
  const ValueId y = b.Op("Tanh", {b.Op("Add", {b.Op("Add", {xw, hu}), bias})});
  b.Output(y);
  RunPass(FuseMatMulPass(), b);
  EXPECT_EQ(OpTypes(b.graph()), (std::vector<std::string>{"MatMul", kFusedMatMulOp}));
  const Node& fused = b.graph().nodes[1];
  ASSERT_NE(fused.fusion, nullptr);
  EXPECT_EQ(fused.inputs, (std::vector<ValueId>{x, w, hu, bias}));
  ASSERT_EQ(fused.fusion->post_ops.size(), 3u);
  EXPECT_EQ(fused.fusion->post_ops[0].input, 2);
  EXPECT_EQ(fused.fusion->post_ops[1].input, 3);
  EXPECT_EQ(fused.fusion->post_ops[2].fn, EltwiseFn::kTanh);
  ASSERT_NE(fused.fusion->unfused, nullptr);
  EXPECT_EQ(fused.fusion->unfused->nodes.size(), 4u);
}

TEST(FuseMatMulTest, TransposeOfTheLastTwoDimsIsFolded) {
  // y = q @ Transpose(k, perm [0, 2, 1]) * 0.5, q [3, 1, 4], k [3, 5, 4]
  Builder b;
  const ValueId q = b.Input("q", {3, 1, 4});
  const ValueId k = b.Input("k", {3, 5, 4});
  const ValueId kt = b.Op("Transpose", {k}, 13, {{"perm", Ints({0, 2, 1})}});
  const ValueId y = b.Op("Mul", {b.Op("MatMul", {q, kt}), b.Scalar("half", 0.5f)});
  b.Output(y);
  RunPass(FuseMatMulPass(), b);
  ASSERT_EQ(OpTypes(b.graph()), std::vector<std::string>{kFusedMatMulOp});
  EXPECT_TRUE(b.graph().nodes[0].fusion->trans_b);
  EXPECT_FALSE(b.graph().nodes[0].fusion->trans_a);
  EXPECT_EQ(b.graph().nodes[0].inputs[1], k);

  // A perm that is not a swap of the last two dims stays a Transpose.
  Builder other;
  const ValueId a = other.Input("a", {2, 3, 4});
  const ValueId c = other.Input("c", {3, 2, 5});
  other.Output(
      other.Op("MatMul", {other.Op("Transpose", {a}, 13, {{"perm", Ints({1, 0, 2})}}), c}));
  RunPass(FuseMatMulPass(), other);
  EXPECT_EQ(OpTypes(other.graph()), (std::vector<std::string>{"Transpose", "MatMul"}));

  // Numerics: the folded transpose reads k as stored.
  const Tensor tq = Random(Shape{3, 1, 4}, 4), tk = Random(Shape{3, 5, 4}, 5);
  Builder run;
  const ValueId rq = run.Input("q", {3, 1, 4});
  const ValueId rk = run.Input("k", {3, 5, 4});
  run.Output(run.Op(
      "Mul", {run.Op("MatMul", {rq, run.Op("Transpose", {rk}, 13, {{"perm", Ints({0, 2, 1})}})}),
              run.Scalar("half", 0.5f)}));
  const Tensor got = RunModel(run.shared(), {&tq, &tk});
  ASSERT_EQ(got.shape(), (Shape{3, 1, 5}));
  for (int bt = 0; bt < 3; ++bt) {
    for (int j = 0; j < 5; ++j) {
      double dot = 0;
      for (int i = 0; i < 4; ++i) {
        dot += static_cast<double>(tq.data<float>()[bt * 4 + i]) *
               tk.data<float>()[(bt * 5 + j) * 4 + i];
      }
      ASSERT_NEAR(got.data<float>()[bt * 5 + j], 0.5 * dot, 1e-5);
    }
  }
}

TEST(FuseGeluTest, ErfAndTanhFormsBecomeOneFunction) {
  for (const bool tanh_form : {false, true}) {
    SCOPED_TRACE(tanh_form ? "tanh" : "erf");
    auto build = [&](Builder& b) {
      const ValueId x = b.Input("x", {3, 7});
      ValueId y;
      if (!tanh_form) {
        const ValueId e = b.Op("Erf", {b.Op("Div", {x, b.Scalar("sqrt2", std::sqrt(2.0f))})});
        y = b.Op("Mul", {b.Op("Mul", {x, b.Op("Add", {e, b.Scalar("one", 1.0f)})}),
                         b.Scalar("half", 0.5f)});
      } else {
        const ValueId cube = b.Op("Pow", {x, b.Scalar("three", 3.0f)});
        const ValueId inner = b.Op("Add", {x, b.Op("Mul", {cube, b.Scalar("c", 0.044715f)})});
        const ValueId t =
            b.Op("Tanh",
                 {b.Op("Mul", {inner, b.Scalar("k", std::sqrt(2.0f / static_cast<float>(M_PI)))})});
        y = b.Op("Mul", {b.Op("Mul", {x, b.Op("Add", {t, b.Scalar("one", 1.0f)})}),
                         b.Scalar("half", 0.5f)});
      }
      b.Output(y);
    };
    Builder b;
    build(b);
    const std::vector<std::string> log = RunPass(FuseGeluPass(), b);
    ASSERT_EQ(log.size(), 1u);
    ASSERT_EQ(OpTypes(b.graph()), std::vector<std::string>{kElementwiseOp});
    EXPECT_EQ(b.graph().nodes[0].fusion->post_ops[0].fn,
              tanh_form ? EltwiseFn::kGeluTanh : EltwiseFn::kGeluErf);

    Builder run;
    build(run);
    const Tensor tx = Random(Shape{3, 7}, 6, -4.0f, 4.0f);
    const Tensor got = RunModel(run.shared(), {&tx});
    for (int i = 0; i < 21; ++i) {
      const double v = tx.data<float>()[i];
      const double want =
          tanh_form ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                    : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      ASSERT_NEAR(got.data<float>()[i], want, 2e-6 + 2e-6 * std::fabs(want));
    }
  }
}

TEST(FuseGeluTest, WrongConstantIsLeftAlone) {
  Builder b;
  const ValueId x = b.Input("x", {4});
  const ValueId e = b.Op("Erf", {b.Op("Div", {x, b.Scalar("two", 2.0f)})});
  b.Output(b.Op(
      "Mul", {b.Op("Mul", {x, b.Op("Add", {e, b.Scalar("one", 1.0f)})}), b.Scalar("half", 0.5f)}));
  EXPECT_TRUE(RunPass(FuseGeluPass(), b).empty());
  EXPECT_EQ(b.graph().nodes.size(), 5u);
}

void LayerNormNodes(Builder& b, ValueId x, ValueId gamma, ValueId beta, float eps) {
  Attribute axes = Ints({-1});
  const ValueId mean = b.Op("ReduceMean", {x}, 13, {{"axes", axes}});
  const ValueId d = b.Op("Sub", {x, mean});
  const ValueId var =
      b.Op("ReduceMean", {b.Op("Pow", {d, b.Scalar("two", 2.0f)})}, 13, {{"axes", axes}});
  const ValueId std = b.Op("Sqrt", {b.Op("Add", {var, b.Scalar("eps", eps)})});
  b.Output(b.Op("Add", {b.Op("Mul", {b.Op("Div", {d, std}), gamma}), beta}));
}

TEST(FuseLayerNormTest, DecomposedLayerNormBecomesOneNode) {
  auto build = [](Builder& b) {
    const ValueId x = b.Input("x", {3, 16});
    const ValueId gamma = b.Input("gamma", {16});
    const ValueId beta = b.Input("beta", {16});
    LayerNormNodes(b, x, gamma, beta, 1e-5f);
  };
  Builder b;
  build(b);
  ASSERT_EQ(RunPass(FuseLayerNormPass(), b).size(), 1u);
  ASSERT_EQ(OpTypes(b.graph()), std::vector<std::string>{"LayerNormalization"});
  const Node& ln = b.graph().nodes[0];
  EXPECT_EQ(ln.opset, 17);
  EXPECT_FLOAT_EQ(*ln.GetFloat("epsilon", std::nullopt), 1e-5f);
  EXPECT_EQ(*ln.GetInt("axis", std::nullopt), -1);
  EXPECT_EQ(ln.inputs.size(), 3u);

  Builder run;
  build(run);
  const Tensor tx = Random(Shape{3, 16}, 7), tg = Random(Shape{16}, 8), tb = Random(Shape{16}, 9);
  const Tensor got = RunModel(run.shared(), {&tx, &tg, &tb});
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 16; ++i) mean += tx.data<float>()[r * 16 + i];
    mean /= 16;
    for (int i = 0; i < 16; ++i) {
      const double d = tx.data<float>()[r * 16 + i] - mean;
      var += d * d;
    }
    var /= 16;
    for (int i = 0; i < 16; ++i) {
      const double want =
          (tx.data<float>()[r * 16 + i] - mean) / std::sqrt(var + 1e-5) * tg.data<float>()[i] +
          tb.data<float>()[i];
      ASSERT_NEAR(got.data<float>()[r * 16 + i], want, 1e-5);
    }
  }
}

TEST(FuseLayerNormTest, MeanOverAnotherAxisIsLeftAlone) {
  Builder b;
  const ValueId x = b.Input("x", {3, 16});
  Attribute axes = Ints({0});
  const ValueId mean = b.Op("ReduceMean", {x}, 13, {{"axes", axes}});
  b.Output(b.Op("Sub", {x, mean}));
  EXPECT_TRUE(RunPass(FuseLayerNormPass(), b).empty());
}

TEST(ElideLoopIdentitiesTest, ConditionAndScanIdentitiesAreDropped) {
  // body(i, cond_in, x_in) -> (cond_out = Identity(cond_in), x_out = x_in + 1,
  //                            scan = Identity(x_out))
  auto body = std::make_shared<Graph>();
  body->name = "body";
  ValueType b_type;
  b_type.dtype = DataType::kBool;
  b_type.dims = std::vector<int64_t>{};
  ValueType f_type;
  f_type.dtype = DataType::kFloat32;
  f_type.dims = std::vector<int64_t>{2};
  ValueType i_type;
  i_type.dtype = DataType::kInt64;
  i_type.dims = std::vector<int64_t>{};
  const ValueId i = body->AddValue("i", i_type);
  const ValueId cond_in = body->AddValue("cond_in", b_type);
  const ValueId x_in = body->AddValue("x_in", f_type);
  const ValueId cond_out = body->AddValue("cond_out", b_type);
  const ValueId x_out = body->AddValue("x_out", f_type);
  const ValueId scan = body->AddValue("scan", f_type);
  const ValueId one = body->AddValue("one");
  auto one_t = std::make_shared<Tensor>();
  one_t->Resize(DataType::kFloat32, Shape{1});
  one_t->mutable_data<float>()[0] = 1.0f;
  body->constants.push_back({one, one_t});
  body->inputs = {i, cond_in, x_in};
  body->outputs = {cond_out, x_out, scan};
  auto node = [](const char* op, std::vector<ValueId> in, ValueId out) {
    Node n;
    n.op_type = op;
    n.name = std::string(op) + "_" + std::to_string(out);
    n.opset = 13;
    n.inputs = std::move(in);
    n.outputs = {out};
    return n;
  };
  body->nodes = {node("Identity", {cond_in}, cond_out), node("Add", {x_in, one}, x_out),
                 node("Identity", {x_out}, scan)};

  auto spec = std::make_shared<LoopSpec>();
  spec->current_iteration_param = 0;
  spec->condition_result = 0;
  spec->inputs = {{LoopSpec::InputPort::Kind::kCarried, 1, 1, 0, 0, 1},
                  {LoopSpec::InputPort::Kind::kCarried, 2, 2, 1, 0, 1}};
  LoopSpec::OutputPort last;
  last.kind = LoopSpec::OutputPort::Kind::kLastValue;
  last.node_output = 0;
  last.body_result = 1;
  LoopSpec::OutputPort stacked;
  stacked.kind = LoopSpec::OutputPort::Kind::kStack;
  stacked.node_output = 1;
  stacked.body_result = 2;
  spec->outputs = {last, stacked};

  Builder b;
  Node loop;
  loop.op_type = "Loop";
  loop.name = "loop";
  loop.opset = 13;
  loop.loop = spec;
  Attribute attr;
  attr.type = Attribute::Type::kGraph;
  attr.graph = body;
  loop.attributes["body"] = attr;
  b.graph().nodes.push_back(loop);
  const std::vector<std::string> log = RunPass(ElideLoopIdentitiesPass(), b);
  ASSERT_EQ(log.size(), 1u);
  const Graph& rewritten = *b.graph().nodes[0].attributes.at("body").graph;
  EXPECT_EQ(OpTypes(rewritten), std::vector<std::string>{"Add"});
  EXPECT_EQ(rewritten.outputs[0], cond_in);  // the condition is handed straight back
  EXPECT_EQ(rewritten.outputs[2], x_out);    // the scan reads the Add's result
  EXPECT_EQ(body->nodes.size(), 3u);         // the original body is not modified
}

}  // namespace
}  // namespace loopserve::engine::transform
