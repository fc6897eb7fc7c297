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
#include "engine/kernels/reference/reference.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/node_evaluator.h"
#include "engine/transform/elide_loop_identities.h"
#include "engine/transform/eliminate_redundant.h"
#include "engine/transform/fold_constants.h"
#include "engine/transform/fold_into_conv.h"
#include "engine/transform/fuse_conv.h"
#include "engine/transform/fuse_elementwise.h"
#include "engine/transform/fuse_gelu.h"
#include "engine/transform/fuse_layer_norm.h"
#include "engine/transform/fuse_matmul.h"
#include "engine/transform/fuse_softmax.h"
#include "engine/transform/hoist_loop_invariants.h"
#include "engine/transform/hoist_loop_projections.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/attribute_builders.h"

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

// log_softmax(x) along the last dim of a [rows, n] row-major tensor, in double.
std::vector<double> LogSoftmaxRows(const Tensor& x, int64_t rows, int64_t n) {
  std::vector<double> y(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data<float>() + r * n;
    double max = xr[0];
    for (int64_t j = 0; j < n; ++j) max = std::max(max, static_cast<double>(xr[j]));
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(xr[j] - max);
    for (int64_t j = 0; j < n; ++j) y[r * n + j] = xr[j] - max - std::log(sum);
  }
  return y;
}

TEST(FuseSoftmaxTest, LogSoftmaxPlusRowScoresBecomesOneNode) {
  // A beam step's total = LogSoftmax(logits) + Unsqueeze(score, -1): logits [4, 1003], score [4].
  Builder b;
  const ValueId logits = b.Input("logits", {4, 1003});
  const ValueId score = b.Input("score", {4, 1});
  const ValueId total = b.Op("Add", {b.Op("LogSoftmax", {logits}, 13), score});
  b.Output(total);
  const std::vector<std::string> log = RunPass(FuseSoftmaxPass(), b);
  ASSERT_EQ(OpTypes(b.graph()), std::vector<std::string>{"LogSoftmax"});
  ASSERT_EQ(log.size(), 1u);
  const Node& fused = b.graph().nodes[0];
  ASSERT_NE(fused.fusion, nullptr);
  EXPECT_EQ(fused.inputs, (std::vector<ValueId>{logits, score}));
  EXPECT_EQ(fused.outputs, std::vector<ValueId>{total});
  ASSERT_EQ(fused.fusion->post_ops.size(), 1u);
  EXPECT_EQ(fused.fusion->post_ops[0].op, ArithOp::kAdd);
  ASSERT_NE(fused.fusion->unfused, nullptr);
  EXPECT_EQ(fused.fusion->unfused->nodes.size(), 2u);

  // Numerics through the whole pipeline, with the score first or second, added or subtracted,
  // per row ([4, 1]) or one value for all rows ([1]): against double precision.
  const Tensor x = Random(Shape{4, 1003}, 21, -30.0f, 30.0f);
  const std::vector<double> lsm = LogSoftmaxRows(x, 4, 1003);
  for (const bool per_row : {true, false}) {
    for (const std::string op : {"Add", "Sub"}) {
      for (const bool score_first : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << op << " per_row " << per_row << " score_first " << score_first);
        const Tensor c = Random(per_row ? Shape{4, 1} : Shape{1}, 22, -5.0f, 5.0f);
        Builder run;
        const ValueId rx = run.Input("logits", {4, 1003});
        const ValueId rc =
            run.Input("score", per_row ? std::vector<int64_t>{4, 1} : std::vector<int64_t>{1});
        const ValueId l = run.Op("LogSoftmax", {rx}, 13);
        run.Output(
            run.Op(op, score_first ? std::vector<ValueId>{rc, l} : std::vector<ValueId>{l, rc}));
        const Tensor got = RunModel(run.shared(), {&x, &c});
        ASSERT_EQ(got.shape(), (Shape{4, 1003}));
        for (int64_t r = 0; r < 4; ++r) {
          const double cr = c.data<float>()[per_row ? r : 0];
          for (int64_t j = 0; j < 1003; ++j) {
            const double v = lsm[r * 1003 + j];
            const double expected = op == "Add" ? v + cr : score_first ? cr - v : v - cr;
            ASSERT_NEAR(got.data<float>()[r * 1003 + j], expected,
                        1e-4 + 1e-5 * std::fabs(expected))
                << "row " << r << " column " << j;
          }
        }
      }
    }
  }
}

TEST(FuseSoftmaxTest, SoftmaxChainRunsAsAnEpilogue) {
  // Relu(Softmax(x) * w - 0.001) with w [n] broadcast over rows: a general epilogue; then an
  // operand that grows the result ([3, n] added to a [1, n] softmax) runs the nodes unfused.
  const int64_t n = 37;
  const Tensor x = Random(Shape{3, n}, 23);
  const Tensor w = Random(Shape{n}, 24, 0.5f, 2.0f);
  Builder run;
  const ValueId rx = run.Input("x", {3, n});
  const ValueId rw = run.Input("w", {n});
  run.Output(run.Op("Relu", {run.Op("Sub", {run.Op("Mul", {run.Op("Softmax", {rx}, 13), rw}),
                                            run.Scalar("eps", 0.001f)})}));
  Builder probe;
  probe.Output(
      probe.Op("Relu", {probe.Op("Mul", {probe.Op("Softmax", {probe.Input("x", {3, n})}, 13),
                                         probe.Input("w", {n})})}));
  RunPass(FuseSoftmaxPass(), probe);
  EXPECT_EQ(OpTypes(probe.graph()), std::vector<std::string>{"Softmax"});
  const Tensor got = RunModel(run.shared(), {&x, &w});
  const std::vector<double> lsm = LogSoftmaxRows(x, 3, n);
  ASSERT_EQ(got.shape(), (Shape{3, n}));
  for (int64_t i = 0; i < 3 * n; ++i) {
    const double expected = std::max(0.0, std::exp(lsm[i]) * w.data<float>()[i % n] - 0.001);
    ASSERT_NEAR(got.data<float>()[i], expected, 1e-6) << i;
  }

  const Tensor row = Random(Shape{1, n}, 25);
  const Tensor addend = Random(Shape{3, n}, 26);
  Builder grow;
  const ValueId gx = grow.Input("x", {1, n});
  const ValueId ga = grow.Input("a", {3, n});
  grow.Output(grow.Op("Add", {grow.Op("LogSoftmax", {gx}, 13), ga}));
  const Tensor grown = RunModel(grow.shared(), {&row, &addend});
  const std::vector<double> row_lsm = LogSoftmaxRows(row, 1, n);
  ASSERT_EQ(grown.shape(), (Shape{3, n}));
  for (int64_t i = 0; i < 3 * n; ++i) {
    ASSERT_NEAR(grown.data<float>()[i], row_lsm[i % n] + addend.data<float>()[i], 1e-5) << i;
  }
}

TEST(FuseSoftmaxTest, SoftmaxWithTwoReadersIsLeftAlone) {
  Builder b;
  const ValueId s = b.Op("Softmax", {b.Input("x", {2, 5})}, 13);
  b.Output(b.Op("Add", {s, b.Scalar("one", 1.0f)}));
  b.Output(s);
  EXPECT_TRUE(RunPass(FuseSoftmaxPass(), b).empty());
  EXPECT_EQ(OpTypes(b.graph()), (std::vector<std::string>{"Softmax", "Add"}));
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

// The declared type of a graph value.
ValueType TypeOf(DataType dtype, std::vector<int64_t> dims) {
  ValueType t;
  t.dtype = dtype;
  t.dims = std::move(dims);
  return t;
}

// An opset-13 node `op` reading `in` and writing `out`, named after its op and output.
Node BodyNode(const char* op, std::vector<ValueId> in, ValueId out) {
  Node n;
  n.op_type = op;
  n.name = std::string(op) + "_" + std::to_string(out);
  n.opset = 13;
  n.inputs = std::move(in);
  n.outputs = {out};
  return n;
}

// A Loop node (opset 13) over `body` that carries the condition and one state (body inputs 1 and
// 2, body results 0 and 1) and returns the state's last value, then the `more` output ports.
Node CarriedStateLoop(std::shared_ptr<const Graph> body,
                      std::vector<LoopSpec::OutputPort> more = {}) {
  auto spec = std::make_shared<LoopSpec>();
  spec->current_iteration_param = 0;
  spec->condition_result = 0;
  spec->inputs = {{LoopSpec::InputPort::Kind::kCarried, 1, 1, 0, 0, 1},
                  {LoopSpec::InputPort::Kind::kCarried, 2, 2, 1, 0, 1}};
  LoopSpec::OutputPort last;
  last.kind = LoopSpec::OutputPort::Kind::kLastValue;
  last.node_output = 0;
  last.body_result = 1;
  spec->outputs = {last};
  spec->outputs.insert(spec->outputs.end(), more.begin(), more.end());
  Node loop;
  loop.op_type = "Loop";
  loop.name = "loop";
  loop.opset = 13;
  loop.loop = spec;
  Attribute attr;
  attr.type = Attribute::Type::kGraph;
  attr.graph = std::move(body);
  loop.attributes["body"] = attr;
  return loop;
}

TEST(ElideLoopIdentitiesTest, ConditionAndScanIdentitiesAreDropped) {
  // body(i, cond_in, x_in) -> (cond_out = Identity(cond_in), x_out = x_in + 1,
  //                            scan = Identity(x_out))
  auto body = std::make_shared<Graph>();
  body->name = "body";
  const ValueType b_type = TypeOf(DataType::kBool, {});
  const ValueType f_type = TypeOf(DataType::kFloat32, {2});
  const ValueType i_type = TypeOf(DataType::kInt64, {});
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
  body->nodes = {BodyNode("Identity", {cond_in}, cond_out), BodyNode("Add", {x_in, one}, x_out),
                 BodyNode("Identity", {x_out}, scan)};

  LoopSpec::OutputPort stacked;
  stacked.kind = LoopSpec::OutputPort::Kind::kStack;
  stacked.node_output = 1;
  stacked.body_result = 2;
  Builder b;
  const Node loop = CarriedStateLoop(body, {stacked});
  b.graph().nodes.push_back(loop);
  const std::vector<std::string> log = RunPass(ElideLoopIdentitiesPass(), b);
  ASSERT_EQ(log.size(), 1u);
  const Graph& rewritten = *b.graph().nodes[0].attributes.at("body").graph;
  EXPECT_EQ(OpTypes(rewritten), std::vector<std::string>{"Add"});
  EXPECT_EQ(rewritten.outputs[0], cond_in);  // the condition is handed straight back
  EXPECT_EQ(rewritten.outputs[2], x_out);    // the scan reads the Add's result
  EXPECT_EQ(body->nodes.size(), 3u);         // the original body is not modified
}

// An RNN over a sequence as exporters write it: body(i, cond_in, h_in) -> (cond_out, h_out) with
// x_t = Gather(X, i), h_out = Tanh(MatMul(x_t, W) + Gemm(x_t, G, c, alpha, beta, transB) +
// MatMul(h_in, U)); X, W, G, c and U are the enclosing graph's. `index_is_i` false gathers with a
// constant index instead of the iteration counter.
struct RnnLoop {
  std::shared_ptr<Graph> graph;
  std::shared_ptr<const Graph> original_body;
  Tensor x, w, g, c, u, h0;
  int64_t batch = 0, in = 0, hidden = 0;
};

constexpr int64_t kSteps = 7, kIn = 5, kHidden = 4;

RnnLoop MakeRnnLoop(bool index_is_i, int64_t batch = 3, int64_t in = kIn,
                    int64_t hidden = kHidden) {
  RnnLoop r;
  r.batch = batch;
  r.in = in;
  r.hidden = hidden;
  r.x = Random(Shape{kSteps, batch, in}, 1);
  r.w = Random(Shape{in, hidden}, 2, -0.5f, 0.5f);
  r.g = Random(Shape{hidden, in}, 3, -0.5f, 0.5f);  // Gemm transB: [N, K]
  r.c = Random(Shape{hidden}, 4);
  r.u = Random(Shape{hidden, hidden}, 5, -0.5f, 0.5f);
  r.h0 = Random(Shape{batch, hidden}, 6);

  auto outer = std::make_shared<Graph>();
  outer->name = "rnn";
  const ValueId m = outer->AddValue("M", TypeOf(DataType::kInt64, {}));
  const ValueId cond = outer->AddValue("cond", TypeOf(DataType::kBool, {}));
  const ValueId h0 = outer->AddValue("h0", TypeOf(DataType::kFloat32, {batch, hidden}));
  const ValueId x = outer->AddValue("X", TypeOf(DataType::kFloat32, {kSteps, batch, in}));
  const ValueId h = outer->AddValue("h", TypeOf(DataType::kFloat32, {batch, hidden}));
  outer->inputs = {m, cond, h0, x};
  outer->outputs = {h};
  std::vector<ValueId> constants;
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"W", &r.w}, {"G", &r.g}, {"c", &r.c}, {"U", &r.u}}) {
    auto copy = std::make_shared<Tensor>();
    copy->CopyFrom(*t);
    const ValueId v = outer->AddValue(name);
    outer->constants.push_back({v, copy});
    constants.push_back(v);
  }

  auto body = std::make_shared<Graph>();
  body->name = "rnn_body";
  const ValueId i = body->AddValue("i", TypeOf(DataType::kInt64, {}));
  const ValueId cond_in = body->AddValue("cond_in", TypeOf(DataType::kBool, {}));
  const ValueId h_in = body->AddValue("h_in", TypeOf(DataType::kFloat32, {batch, hidden}));
  const ValueId cond_out = body->AddValue("cond_out", TypeOf(DataType::kBool, {}));
  const ValueId h_out = body->AddValue("h_out", TypeOf(DataType::kFloat32, {batch, hidden}));
  const ValueId x_in = body->AddValue("X_in");
  body->captures.push_back({x_in, x});
  std::vector<ValueId> inner;  // W, G, c, U
  for (ValueId v : constants) {
    inner.push_back(body->AddValue(outer->ValueName(v) + "_in"));
    body->captures.push_back({inner.back(), v});
  }
  ValueId index = i;
  if (!index_is_i) {
    index = body->AddValue("two");
    auto two = std::make_shared<Tensor>();
    two->Resize(DataType::kInt64, Shape{});
    two->mutable_data<int64_t>()[0] = 2;
    body->constants.push_back({index, two});
  }
  const ValueId x_t = body->AddValue("x_t");
  const ValueId xw = body->AddValue("xw");
  const ValueId xg = body->AddValue("xg");
  const ValueId hu = body->AddValue("hu");
  const ValueId s1 = body->AddValue("s1");
  const ValueId s2 = body->AddValue("s2");
  body->inputs = {i, cond_in, h_in};
  body->outputs = {cond_out, h_out};
  Node gemm = BodyNode("Gemm", {x_t, inner[1], inner[2]}, xg);
  Attribute one;
  one.type = Attribute::Type::kInt;
  one.i = 1;
  gemm.attributes["transB"] = one;
  Attribute alpha;
  alpha.type = Attribute::Type::kFloat;
  alpha.f = 0.5f;
  gemm.attributes["alpha"] = alpha;
  Attribute beta = alpha;
  beta.f = 2.0f;
  gemm.attributes["beta"] = beta;
  Node gather = BodyNode("Gather", {x_in, index}, x_t);
  body->nodes = {BodyNode("Identity", {cond_in}, cond_out),
                 gather,
                 BodyNode("MatMul", {x_t, inner[0]}, xw),
                 gemm,
                 BodyNode("MatMul", {h_in, inner[3]}, hu),
                 BodyNode("Add", {xw, xg}, s1),
                 BodyNode("Add", {s1, hu}, s2),
                 BodyNode("Tanh", {s2}, h_out)};
  r.original_body = body;

  Node loop = CarriedStateLoop(body);
  loop.inputs = {m, cond, h0};
  loop.outputs = {h};
  loop.implicit_inputs = {x, constants[0], constants[1], constants[2], constants[3]};
  outer->nodes.push_back(loop);
  r.graph = outer;
  return r;
}

// The same recurrence in double precision from the ops' definitions.
std::vector<double> RnnLoopExpected(const RnnLoop& r, bool index_is_i) {
  const int64_t batch = r.batch, in = r.in, hidden = r.hidden;
  const float* x = r.x.data<float>();
  std::vector<double> h(r.h0.data<float>(), r.h0.data<float>() + batch * hidden);
  for (int64_t t = 0; t < kSteps; ++t) {
    const int64_t step = index_is_i ? t : 2;
    std::vector<double> next(batch * hidden);
    for (int64_t b = 0; b < batch; ++b) {
      const float* xt = x + (step * batch + b) * in;
      for (int64_t n = 0; n < hidden; ++n) {
        double xw = 0, xg = 0, hu = 0;
        for (int64_t k = 0; k < in; ++k) {
          xw += double{xt[k]} * r.w.data<float>()[k * hidden + n];
          xg += double{xt[k]} * r.g.data<float>()[n * in + k];
        }
        for (int64_t k = 0; k < hidden; ++k)
          hu += h[b * hidden + k] * r.u.data<float>()[k * hidden + n];
        next[b * hidden + n] = std::tanh(xw + 0.5 * xg + 2.0 * r.c.data<float>()[n] + hu);
      }
    }
    h = std::move(next);
  }
  return h;
}

TEST(HoistLoopProjectionsTest, InputProjectionsMoveBeforeTheLoop) {
  RnnLoop r = MakeRnnLoop(/*index_is_i=*/true);
  Builder b;
  b.graph() = *r.graph;
  const std::vector<std::string> log = RunPass(HoistLoopProjectionsPass(), b);
  ASSERT_EQ(log.size(), 1u);
  // MatMul(X, W), then MatMul(X, 0.5 G^T) + 2 c, then the Loop.
  EXPECT_EQ(OpTypes(b.graph()), (std::vector<std::string>{"MatMul", "MatMul", "Add", "Loop"}));
  const Node& loop = b.graph().nodes[3];
  EXPECT_EQ(loop.implicit_inputs.size(), 7u);  // X, W, G, c, U and the two products
  const Graph& body = *loop.attributes.at("body").graph;
  // Each product became a Gather of the iteration's step; the x_t Gather is gone.
  EXPECT_EQ(OpTypes(body), (std::vector<std::string>{"Identity", "Gather", "Gather", "MatMul",
                                                     "Add", "Add", "Tanh"}));
  EXPECT_EQ(body.nodes[1].inputs[1], body.inputs[0]);
  EXPECT_EQ(body.captures.back().outer, b.graph().nodes[2].outputs[0]);
  EXPECT_EQ(r.original_body->nodes.size(), 8u);  // the original body is not modified
  // The hoisted Gemm weights: 0.5 * G^T.
  const Tensor* w = nullptr;
  for (const auto& [v, t] : b.graph().constants) {
    if (v == b.graph().nodes[1].inputs[1]) w = t.get();
  }
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->shape(), (Shape{kIn, kHidden}));
  EXPECT_FLOAT_EQ(w->data<float>()[1 * kHidden + 2], 0.5f * r.g.data<float>()[2 * kIn + 1]);
}

TEST(HoistLoopProjectionsTest, HoistedLoopComputesTheRecurrence) {
  // The whole pipeline (the pass, then the fusions of the outer graph and of the body) against
  // the recurrence in double precision.
  RnnLoop r = MakeRnnLoop(/*index_is_i=*/true);
  Tensor m(DataType::kInt64, Shape{});
  m.mutable_data<int64_t>()[0] = kSteps;
  Tensor cond(DataType::kBool, Shape{});
  cond.mutable_data<bool>()[0] = true;
  const Tensor h = RunModel(r.graph, {&m, &cond, &r.h0, &r.x});
  ASSERT_EQ(h.shape(), (Shape{r.batch, kHidden}));
  const std::vector<double> expected = RnnLoopExpected(r, true);
  for (int64_t e = 0; e < h.NumElements(); ++e) {
    EXPECT_NEAR(h.data<float>()[e], expected[e], 1e-5) << "element " << e;
  }
}

TEST(HoistLoopProjectionsTest, StepsOfMoreThanFourRowsStayInTheBody) {
  // At batch 5 each step's product is already a small GEMM: left in the body.
  RnnLoop r = MakeRnnLoop(/*index_is_i=*/true, /*batch=*/5);
  Builder b;
  b.graph() = *r.graph;
  EXPECT_TRUE(RunPass(HoistLoopProjectionsPass(), b).empty());
  EXPECT_EQ(OpTypes(b.graph()), std::vector<std::string>{"Loop"});
  // At 4 they move.
  RnnLoop four = MakeRnnLoop(/*index_is_i=*/true, /*batch=*/4);
  Builder b4;
  b4.graph() = *four.graph;
  EXPECT_EQ(RunPass(HoistLoopProjectionsPass(), b4).size(), 1u);
}

TEST(HoistLoopProjectionsTest, WeightsOfAMegabyteMoveAtAnyBatch) {
  // [500, 512] float weights (just under 1 MB) at batch 5 stay in the body.
  RnnLoop small = MakeRnnLoop(/*index_is_i=*/true, /*batch=*/5, /*in=*/500, /*hidden=*/512);
  Builder kept;
  kept.graph() = *small.graph;
  EXPECT_TRUE(RunPass(HoistLoopProjectionsPass(), kept).empty());
  // [512, 512] float weights (1 MB, half of a 2 MB L2) at batch 5: both products move out (the
  // Gemm's [512, 512] transposed is 1 MB too); the result still follows the recurrence.
  RnnLoop r = MakeRnnLoop(/*index_is_i=*/true, /*batch=*/5, /*in=*/512, /*hidden=*/512);
  Builder b;
  b.graph() = *r.graph;
  ASSERT_EQ(RunPass(HoistLoopProjectionsPass(), b).size(), 1u);
  EXPECT_EQ(OpTypes(b.graph()), (std::vector<std::string>{"MatMul", "MatMul", "Add", "Loop"}));
  Tensor m(DataType::kInt64, Shape{});
  m.mutable_data<int64_t>()[0] = kSteps;
  Tensor cond(DataType::kBool, Shape{});
  cond.mutable_data<bool>()[0] = true;
  const Tensor h = RunModel(r.graph, {&m, &cond, &r.h0, &r.x});
  const std::vector<double> expected = RnnLoopExpected(r, true);
  ASSERT_EQ(h.NumElements(), static_cast<int64_t>(expected.size()));
  // Float sums of 512 products of up to 1 in magnitude: a few 1e-4 of rounding before the Tanh.
  for (int64_t e = 0; e < h.NumElements(); ++e) {
    EXPECT_NEAR(h.data<float>()[e], expected[e], 1e-3) << "element " << e;
  }
}

TEST(HoistLoopProjectionsTest, StepNotIndexedByTheIterationIsLeftAlone) {
  RnnLoop r = MakeRnnLoop(/*index_is_i=*/false);
  Builder b;
  b.graph() = *r.graph;
  EXPECT_TRUE(RunPass(HoistLoopProjectionsPass(), b).empty());
  EXPECT_EQ(OpTypes(b.graph()), std::vector<std::string>{"Loop"});
  Tensor m(DataType::kInt64, Shape{});
  m.mutable_data<int64_t>()[0] = kSteps;
  Tensor cond(DataType::kBool, Shape{});
  cond.mutable_data<bool>()[0] = true;
  const Tensor h = RunModel(r.graph, {&m, &cond, &r.h0, &r.x});
  const std::vector<double> expected = RnnLoopExpected(r, false);
  ASSERT_EQ(h.NumElements(), static_cast<int64_t>(expected.size()));
  for (int64_t e = 0; e < h.NumElements(); ++e) {
    EXPECT_NEAR(h.data<float>()[e], expected[e], 1e-5) << "element " << e;
  }
}

TEST(HoistLoopProjectionsTest, WeightsComputedInTheBodyAreLeftAlone) {
  RnnLoop r = MakeRnnLoop(/*index_is_i=*/true);
  // W becomes a body value (Identity of the captured W): not invariant as far as the pass knows;
  // the Gemm still moves out.
  auto body = std::make_shared<Graph>(*r.original_body);
  const ValueId w_copy = body->AddValue("w_copy");
  Node identity;
  identity.op_type = "Identity";
  identity.name = "copy_w";
  identity.opset = 13;
  identity.inputs = {body->nodes[2].inputs[1]};
  identity.outputs = {w_copy};
  body->nodes[2].inputs[1] = w_copy;
  body->nodes.insert(body->nodes.begin() + 2, identity);
  r.graph->nodes[0].attributes["body"].graph = body;
  Builder b;
  b.graph() = *r.graph;
  ASSERT_EQ(RunPass(HoistLoopProjectionsPass(), b).size(), 1u);
  EXPECT_EQ(OpTypes(b.graph()), (std::vector<std::string>{"MatMul", "Add", "Loop"}));
  const Graph& rewritten = *b.graph().nodes[2].attributes.at("body").graph;
  // The x_t Gather stays for the MatMul that remains.
  EXPECT_EQ(OpTypes(rewritten),
            (std::vector<std::string>{"Identity", "Gather", "Identity", "MatMul", "Gather",
                                      "MatMul", "Add", "Add", "Tanh"}));
}

// ---- fold_constants, fold_into_conv and the optimized paths they lead to --------------------

using test_attrs::FloatAttr;
using test_attrs::IntAttr;

Tensor Int64s(const Shape& shape, std::vector<int64_t> values) {
  Tensor t(DataType::kInt64, shape);
  std::copy(values.begin(), values.end(), t.mutable_data<int64_t>());
  return t;
}

// The pipeline of Plan::Compile, with the engine's kernels as the evaluator: what a pass test
// needs to see folding happen on a Builder graph.
TransformContext EvaluatingContext(Builder& b) {
  TransformContext c = b.Context();
  c.evaluate = [](const Node& node, const std::vector<const Tensor*>& inputs) {
    return EvaluateNode(KernelRegistry::Builtin(), node, inputs);
  };
  return c;
}

// Slice -> Concat -> Unsqueeze of constants (Silero VAD v5's weights) fold into one constant with
// the values the spec gives; the node reading it and the inputs stay.
TEST(FoldConstantsTest, ChainOfConstantsBecomesOneConstant) {
  Builder b;
  const ValueId x = b.Input("x", {2, 1, 6});
  const Tensor w = Random(Shape{4, 3}, 40);
  const ValueId wc = b.Constant("w", w);
  const ValueId starts = b.Constant("starts", Int64s(Shape{1}, {1}));
  const ValueId ends = b.Constant("ends", Int64s(Shape{1}, {3}));
  const ValueId axes = b.Constant("axes", Int64s(Shape{1}, {0}));
  const ValueId sliced = b.Op("Slice", {wc, starts, ends, axes});  // rows 1, 2: [2, 3]
  const ValueId joined = b.Op("Concat", {sliced, sliced}, 13, {{"axis", IntAttr(1)}});  // [2, 6]
  const ValueId unsq_axes = b.Constant("unsq_axes", Int64s(Shape{1}, {1}));
  const ValueId weights = b.Op("Unsqueeze", {joined, unsq_axes});  // [2, 1, 6]
  b.Output(b.Op("Add", {x, weights}));
  std::vector<std::string> log;
  ASSERT_TRUE(FoldConstantsPass().Run(b.graph(), EvaluatingContext(b), log).ok());
  EXPECT_EQ(log.size(), 3u);
  EXPECT_EQ(OpTypes(b.graph()), std::vector<std::string>{"Add"});
  const Tensor* folded = b.Context().find_constant(weights);
  ASSERT_NE(folded, nullptr);
  ASSERT_EQ(folded->shape(), (Shape{2, 1, 6}));
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 6; ++c) {
      EXPECT_EQ(folded->data<float>()[r * 6 + c], w.data<float>()[(1 + r) * 3 + c % 3]);
    }
  }
}

// Shape of a checked top-level input with a fully known declared shape folds; one with an
// unknown dim, a one-element input (which a request may send as a scalar) and a body's input
// (not checked) do not. Random generators are never folded.
TEST(FoldConstantsTest, ShapeOfDeclaredInputAndWhatIsLeftAlone) {
  Builder b;
  const ValueId x = b.Input("x", {2, 3, 5});
  const ValueId y = b.Input("y", {-1, 3});
  const ValueId s = b.Input("s", {1});
  const ValueId shape_x = b.Op("Shape", {x}, 15, {{"start", IntAttr(1)}});
  const ValueId shape_y = b.Op("Shape", {y});
  const ValueId shape_s = b.Op("Shape", {s});
  const ValueId size_x = b.Op("Size", {x});
  const ValueId random = b.Op("RandomNormalLike", {x});
  for (ValueId v : {shape_x, shape_y, shape_s, size_x, random}) b.Output(v);
  TransformContext context = EvaluatingContext(b);
  context.inputs_checked = true;
  std::vector<std::string> log;
  ASSERT_TRUE(FoldConstantsPass().Run(b.graph(), context, log).ok());
  EXPECT_EQ(OpTypes(b.graph()), (std::vector<std::string>{"Shape", "Shape", "RandomNormalLike"}));
  const Tensor* dims = b.Context().find_constant(shape_x);
  ASSERT_NE(dims, nullptr);
  ASSERT_EQ(dims->NumElements(), 2);
  EXPECT_EQ(dims->data<int64_t>()[0], 3);
  EXPECT_EQ(dims->data<int64_t>()[1], 5);
  const Tensor* size = b.Context().find_constant(size_x);
  ASSERT_NE(size, nullptr);
  EXPECT_EQ(size->data<int64_t>()[0], 30);

  Builder body;
  const ValueId z = body.Input("z", {2, 3});
  body.Output(body.Op("Shape", {z}));
  std::vector<std::string> body_log;
  ASSERT_TRUE(FoldConstantsPass().Run(body.graph(), EvaluatingContext(body), body_log).ok());
  EXPECT_TRUE(body_log.empty());
}

// An expansion past the cap is not evaluated at all (a hostile ConstantOfShape cannot make the
// load allocate), and a node whose evaluation fails stays for the run to report.
TEST(FoldConstantsTest, LargeExpansionsAndFailuresStay) {
  Builder b;
  const ValueId x = b.Input("x", {4});
  const ValueId huge = b.Constant("huge", Int64s(Shape{2}, {1 << 20, 1 << 20}));
  const ValueId filled = b.Op("ConstantOfShape", {huge}, 9);
  const ValueId bad = b.Op(
      "Reshape", {b.Constant("v", Random(Shape{6}, 41)), b.Constant("to", Int64s(Shape{1}, {4}))});
  b.Output(filled);
  b.Output(b.Op("Add", {x, bad}));
  std::vector<std::string> log;
  ASSERT_TRUE(FoldConstantsPass().Run(b.graph(), EvaluatingContext(b), log).ok());
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(OpTypes(b.graph()), (std::vector<std::string>{"ConstantOfShape", "Reshape", "Add"}));
}

// Inside an If branch: the branch's Slice and Concat of the model's constants (captured) fold
// when the branch is compiled; the model's answers are the spec's for both branches.
TEST(FoldConstantsTest, InsideIfBranchThroughTheModel) {
  auto outer = std::make_shared<Graph>();
  outer->name = "main";
  const ValueType cond_type = TypeOf(DataType::kBool, {});
  const ValueType x_type = TypeOf(DataType::kFloat32, {2, 4});
  const ValueId cond = outer->AddValue("cond", cond_type);
  const ValueId x = outer->AddValue("x", x_type);
  const ValueId y = outer->AddValue("y");
  outer->inputs = {cond, x};
  outer->outputs = {y};
  const Tensor w = Random(Shape{4, 2}, 42);
  auto wt = std::make_shared<Tensor>();
  wt->CopyFrom(w);
  const ValueId wc = outer->AddValue("w");
  outer->constants.push_back({wc, wt});

  // then: x + Concat(w[0:2] reshaped to [1, 4], same), else: x - that.
  auto branch = [&](const char* op) {
    Builder g;
    const ValueId w_in = g.graph().AddValue("w_in");
    g.graph().captures.push_back({w_in, wc});
    const ValueId x_in = g.graph().AddValue("x_in");
    g.graph().captures.push_back({x_in, x});
    const ValueId top = g.Op("Slice", {w_in, g.Constant("s", Int64s(Shape{1}, {0})),
                                       g.Constant("e", Int64s(Shape{1}, {2})),
                                       g.Constant("a", Int64s(Shape{1}, {0}))});  // [2, 2]
    const ValueId row = g.Op("Reshape", {top, g.Constant("r", Int64s(Shape{2}, {1, 4}))});
    const ValueId both = g.Op("Concat", {row, row}, 13, {{"axis", IntAttr(0)}});  // [2, 4]
    g.Output(g.Op(op, {x_in, both}));
    return g.shared();
  };
  Node node;
  node.op_type = "If";
  node.name = "if";
  node.opset = 13;
  node.inputs = {cond};
  node.outputs = {y};
  node.implicit_inputs = {wc, x};
  Attribute then_attr, else_attr;
  then_attr.type = else_attr.type = Attribute::Type::kGraph;
  then_attr.graph = branch("Add");
  else_attr.graph = branch("Sub");
  node.attributes["then_branch"] = then_attr;
  node.attributes["else_branch"] = else_attr;
  outer->nodes.push_back(node);

  LoadOptions options;
  options.dump_plan = true;
  absl::StatusOr<std::shared_ptr<const Model>> model = Model::FromGraph(outer, options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE((*model)->plan_dump().find("fold_constants: node 'Concat"), std::string::npos)
      << (*model)->plan_dump();
  const Tensor tx = Random(Shape{2, 4}, 43);
  for (bool c : {true, false}) {
    Tensor tc(DataType::kBool, Shape{});
    tc.mutable_data<bool>()[0] = c;
    RunStats stats;
    std::vector<Value> feed;
    feed.push_back(Value(Tensor::ViewOf(tc)));
    feed.push_back(Value(Tensor::ViewOf(tx)));
    absl::StatusOr<std::vector<Value>> out = (*model)->Run(std::move(feed), RunOptions(), &stats);
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& got = (*out)[0].tensor();
    ASSERT_EQ(got.shape(), (Shape{2, 4}));
    for (int64_t i = 0; i < 8; ++i) {
      const float wv = w.data<float>()[i % 4];  // w[0:2] flattened, repeated per row
      const float xv = tx.data<float>()[i];
      EXPECT_EQ(got.data<float>()[i], c ? xv + wv : xv - wv) << "element " << i;
    }
    EXPECT_EQ(stats.reference_steps, 0);
  }
}

// Conv -> BatchNormalization -> Mul -> Add become one Conv with new weights and bias; the answer
// is the unfolded nodes' through the reference kernels.
TEST(FoldIntoConvTest, BatchNormMulAddFoldIntoWeightsAndBias) {
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    const int64_t c_in = 3, m = 4;
    const Tensor w = Random(Shape{m, c_in, 3, 3}, 50);
    const Tensor bias = Random(Shape{m}, 51);
    const Tensor scale = Random(Shape{m}, 52), beta = Random(Shape{m}, 53),
                 mean = Random(Shape{m}, 54), var = Random(Shape{m}, 55, 0.2f, 3.0f);
    const Tensor mul = Random(Shape{m, 1, 1}, 56);
    const Tensor add = Random(Shape{1, m, 1, 1}, 57);
    Builder b;
    const ValueId x = b.Input("x", {1, c_in, 7, 6});
    std::vector<ValueId> conv_inputs = {x, b.Constant("w", w)};
    if (with_bias) conv_inputs.push_back(b.Constant("b", bias));
    const ValueId conv = b.Op("Conv", conv_inputs, 11, {{"pads", Ints({1, 1, 1, 1})}});
    const ValueId bn = b.Op("BatchNormalization",
                            {conv, b.Constant("scale", scale), b.Constant("beta", beta),
                             b.Constant("mean", mean), b.Constant("var", var)},
                            15, {{"epsilon", FloatAttr(1e-3f)}});
    const ValueId scaled = b.Op("Mul", {b.Constant("mul", mul), bn});
    b.Output(b.Op("Add", {scaled, b.Constant("add", add)}));
    Builder copy;  // the same graph for the pass alone
    copy.graph() = b.graph();
    const std::vector<std::string> log = RunPass(FoldIntoConvPass(), copy);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(OpTypes(copy.graph()), std::vector<std::string>{"Conv"});
    EXPECT_EQ(copy.graph().nodes[0].outputs[0], b.graph().outputs[0]);

    const Tensor tx = Random(Shape{1, c_in, 7, 6}, 58);
    const Tensor got = RunModel(b.shared(), {&tx});
    reference::WindowAttrs window;
    window.pads = {1, 1, 1, 1};
    Tensor expected, normalized;
    ASSERT_TRUE(reference::Conv(tx, w, with_bias ? &bias : nullptr, window, 1, expected).ok());
    ASSERT_TRUE(reference::BatchNorm(expected, scale, beta, mean, var, 1e-3f, normalized).ok());
    ASSERT_EQ(got.shape(), normalized.shape());
    for (int64_t i = 0; i < got.NumElements(); ++i) {
      const int64_t c = (i / 42) % m;
      const double want =
          normalized.data<float>()[i] * double{mul.data<float>()[c]} + add.data<float>()[c];
      EXPECT_NEAR(got.data<float>()[i], want, 1e-4 * (1 + std::abs(want))) << "element " << i;
    }
  }
}

// Left alone: a Conv result with a second reader, runtime weights, a Mul whose operand would
// broadcast the result to a larger shape, a BatchNormalization in training mode.
TEST(FoldIntoConvTest, WhatIsLeftAlone) {
  const Tensor w = Random(Shape{4, 3, 1, 1}, 60);
  const Tensor v4 = Random(Shape{4}, 61, 0.5f, 2.0f);
  {
    Builder b;
    const ValueId x = b.Input("x", {1, 3, 5, 5});
    const ValueId conv = b.Op("Conv", {x, b.Constant("w", w)});
    b.Output(b.Op("Mul", {conv, b.Constant("s", Random(Shape{4, 1, 1}, 62))}));
    b.Output(conv);
    EXPECT_TRUE(RunPass(FoldIntoConvPass(), b).empty());
  }
  {
    Builder b;
    const ValueId x = b.Input("x", {1, 3, 5, 5});
    const ValueId conv = b.Op("Conv", {x, b.Input("w", {4, 3, 1, 1})});
    b.Output(b.Op("Mul", {conv, b.Constant("s", Random(Shape{4, 1, 1}, 63))}));
    EXPECT_TRUE(RunPass(FoldIntoConvPass(), b).empty());
  }
  {
    Builder b;
    const ValueId x = b.Input("x", {1, 3, 5, 5});
    const ValueId conv = b.Op("Conv", {x, b.Constant("w", w)});
    b.Output(b.Op("Mul", {conv, b.Constant("s", Random(Shape{2, 4, 1, 1}, 64))}));
    EXPECT_TRUE(RunPass(FoldIntoConvPass(), b).empty());
  }
  {
    Builder b;
    const ValueId x = b.Input("x", {1, 3, 5, 5});
    const ValueId conv = b.Op("Conv", {x, b.Constant("w", w)});
    b.Output(b.Op(
        "BatchNormalization",
        {conv, b.Constant("a", v4), b.Constant("b", v4), b.Constant("m", v4), b.Constant("v", v4)},
        15, {{"training_mode", IntAttr(1)}}));
    EXPECT_TRUE(RunPass(FoldIntoConvPass(), b).empty());
  }
}

// ConvTranspose with constant weights runs on oneDNN's blocked jit kernels (on plain layouts
// oneDNN 2.6 has only ref:any for most), or with at most 4 output channels per group on its gemm
// path over the plain layouts (PP-OCRv4's 24 -> 1 channel upsampling): no reference step, and the
// reference kernel's values.
TEST(OptimizedPathTest, ConvTransposeWithConstantWeights) {
  struct Case {
    int64_t group, m_per_group, kernel;
  };
  for (const Case& c : {Case{1, 8, 3}, Case{2, 4, 3}, Case{1, 1, 2}}) {
    SCOPED_TRACE(::testing::Message() << "group " << c.group << " m/group " << c.m_per_group);
    const Tensor w = Random(Shape{16, c.m_per_group, c.kernel, c.kernel}, 70);
    const Tensor bias = Random(Shape{c.group * c.m_per_group}, 71);
    const int64_t pad = c.kernel == 3 ? 1 : 0;
    Builder b;
    const ValueId x = b.Input("x", {1, 16, 9, 7});
    b.Output(b.Op("ConvTranspose", {x, b.Constant("w", w), b.Constant("b", bias)}, 11,
                  {{"strides", Ints({2, 2})},
                   {"pads", Ints({pad, pad, pad, pad})},
                   {"group", IntAttr(c.group)}}));
    const Tensor tx = Random(Shape{1, 16, 9, 7}, 72);
    const Tensor got = RunModel(b.shared(), {&tx});
    reference::ConvTransposeAttrs attrs;
    attrs.window.strides = {2, 2};
    attrs.window.pads = {pad, pad, pad, pad};
    attrs.group = c.group;
    Tensor expected;
    ASSERT_TRUE(reference::ConvTranspose(tx, w, &bias, attrs, expected).ok());
    ASSERT_EQ(got.shape(), expected.shape());
    for (int64_t i = 0; i < got.NumElements(); ++i) {
      EXPECT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-4) << "element " << i;
    }
  }
}

// Identity and an inference Dropout are dropped (their readers read the input); a repeated
// Transpose (same input and perm) and a repeated Add are merged into the first; a repeated node
// with other attributes, and one whose output the graph returns, stay. The answer is the spec's.
TEST(EliminateRedundantTest, IdentityDropoutAndRepeatedNodes) {
  Builder b;
  const ValueId x = b.Input("x", {2, 3});
  const ValueId y = b.Input("y", {2, 3});
  const ValueId id = b.Op("Identity", {x});
  const ValueId dropped = b.Op("Dropout", {id}, 13);
  const ValueId t1 = b.Op("Transpose", {dropped}, 13, {{"perm", Ints({1, 0})}});
  const ValueId t2 = b.Op("Transpose", {x}, 13, {{"perm", Ints({1, 0})}});  // same after the drops
  const ValueId t3 = b.Op("Transpose", {x}, 13, {{"perm", Ints({0, 1})}});  // other perm
  const ValueId a1 = b.Op("Add", {x, y});
  const ValueId a2 = b.Op("Add", {x, y});
  const ValueId out_repeat = b.Op("Add", {x, y});  // returned: keeps its producer
  const ValueId sum = b.Op("Add", {b.Op("Mul", {t1, t2}), b.Op("Transpose", {t3}, 13)});
  b.Output(b.Op("Sub", {sum, b.Op("Transpose", {b.Op("Mul", {a1, a2})}, 13)}));
  b.Output(out_repeat);
  const std::vector<std::string> log = RunPass(EliminateRedundantPass(), b);
  EXPECT_EQ(log.size(), 4u);  // Identity, Dropout, Transpose, Add
  EXPECT_EQ(OpTypes(b.graph()),
            (std::vector<std::string>{"Transpose", "Transpose", "Add", "Add", "Mul", "Transpose",
                                      "Add", "Mul", "Transpose", "Sub"}));
  EXPECT_EQ(b.graph().nodes[0].inputs[0], x);

  const Tensor tx = Random(Shape{2, 3}, 80), ty = Random(Shape{2, 3}, 81);
  Builder fresh;  // the same model through the whole pipeline
  fresh.graph() = b.graph();
  const Tensor got = RunModel(fresh.shared(), {&tx, &ty});
  ASSERT_EQ(got.shape(), (Shape{3, 2}));
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      const double xv = tx.data<float>()[j * 3 + i], yv = ty.data<float>()[j * 3 + i];
      const double want = xv * xv + xv - (xv + yv) * (xv + yv);
      EXPECT_NEAR(got.data<float>()[i * 2 + j], want, 1e-5) << i << "," << j;
    }
  }
}

// Conv -> HardSwish written out (x * Clip(x + 3, 0, 6) / 6) -> Add of a per-channel constant ->
// Relu becomes one Conv with three post-ops; a Conv without bias keeps input 2 as an omitted
// slot. The answer is reference::Conv's followed by the ops' definitions.
TEST(FuseConvTest, HardSwishAndConstantsBecomePostOps) {
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    const Tensor w = Random(Shape{4, 3, 3, 3}, 90);
    const Tensor bias = Random(Shape{4}, 91);
    const Tensor shift = Random(Shape{4, 1, 1}, 92);
    Builder b;
    const ValueId x = b.Input("x", {1, 3, 6, 5});
    std::vector<ValueId> conv_inputs = {x, b.Constant("w", w)};
    if (with_bias) conv_inputs.push_back(b.Constant("b", bias));
    const ValueId conv = b.Op("Conv", conv_inputs, 11, {{"pads", Ints({1, 1, 1, 1})}});
    const ValueId clipped = b.Op("Clip", {b.Op("Add", {conv, b.Scalar("three", 3.0f)}),
                                          b.Scalar("zero", 0.0f), b.Scalar("six", 6.0f)});
    const ValueId hs = b.Op("Div", {b.Op("Mul", {conv, clipped}), b.Scalar("six2", 6.0f)});
    b.Output(b.Op("Relu", {b.Op("Add", {hs, b.Constant("shift", shift)})}));
    Builder copy;
    copy.graph() = b.graph();
    ASSERT_EQ(RunPass(FuseConvPass(), copy).size(), 1u);
    ASSERT_EQ(OpTypes(copy.graph()), std::vector<std::string>{"Conv"});
    const Node& fused = copy.graph().nodes[0];
    ASSERT_NE(fused.fusion, nullptr);
    ASSERT_EQ(fused.fusion->post_ops.size(), 3u);
    EXPECT_EQ(fused.fusion->post_ops[0].fn, EltwiseFn::kHardSwish);
    EXPECT_EQ(fused.fusion->post_ops[1].op, ArithOp::kAdd);
    EXPECT_EQ(fused.fusion->post_ops[2].fn, EltwiseFn::kRelu);
    ASSERT_EQ(fused.inputs.size(), 4u);
    EXPECT_EQ(fused.inputs[2] == kNoValue, !with_bias);

    const Tensor tx = Random(Shape{1, 3, 6, 5}, 93, -3.0f, 3.0f);
    const Tensor got = RunModel(b.shared(), {&tx});
    reference::WindowAttrs window;
    window.pads = {1, 1, 1, 1};
    Tensor conv_out;
    ASSERT_TRUE(reference::Conv(tx, w, with_bias ? &bias : nullptr, window, 1, conv_out).ok());
    ASSERT_EQ(got.shape(), conv_out.shape());
    for (int64_t i = 0; i < got.NumElements(); ++i) {
      const double v = conv_out.data<float>()[i];
      const double h = v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
      const double want = std::max(h + shift.data<float>()[i / 30], 0.0);
      EXPECT_NEAR(got.data<float>()[i], want, 1e-5 * (1 + std::abs(want))) << "element " << i;
    }
  }
}

// A binary op with a computed operand (a residual Add, a squeeze-excitation Mul whose operand is
// larger than the Conv's result) ends the chain; an activation before it is still absorbed. The
// answer (the broadcast Mul included) is the reference's.
TEST(FuseConvTest, ComputedOperandEndsTheChain) {
  const Tensor w = Random(Shape{4, 4, 1, 1}, 94);
  Builder b;
  const ValueId x = b.Input("x", {1, 4, 3, 3});
  const ValueId pooled = b.Op("GlobalAveragePool", {x});
  const ValueId gate = b.Op("Sigmoid", {b.Op("Conv", {pooled, b.Constant("w", w)})});
  b.Output(b.Op("Mul", {x, gate}));  // [1, 4, 3, 3] from a [1, 4, 1, 1] Conv result
  Builder copy;
  copy.graph() = b.graph();
  RunPass(FuseConvPass(), copy);
  EXPECT_EQ(OpTypes(copy.graph()), (std::vector<std::string>{"GlobalAveragePool", "Conv", "Mul"}));

  const Tensor tx = Random(Shape{1, 4, 3, 3}, 95);
  const Tensor got = RunModel(b.shared(), {&tx});
  ASSERT_EQ(got.shape(), (Shape{1, 4, 3, 3}));
  for (int64_t c = 0; c < 4; ++c) {
    double z = 0;
    for (int64_t k = 0; k < 4; ++k) {
      double mean = 0;
      for (int64_t i = 0; i < 9; ++i) mean += tx.data<float>()[k * 9 + i] / 9.0;
      z += w.data<float>()[c * 4 + k] * mean;
    }
    const double g = 1 / (1 + std::exp(-z));
    for (int64_t i = 0; i < 9; ++i) {
      EXPECT_NEAR(got.data<float>()[c * 9 + i], tx.data<float>()[c * 9 + i] * g, 1e-5);
    }
  }
}

// Pointwise Convs with constant weights: on plain NCHW through oneDNN's gemm path (no reorders),
// or, where oneDNN has only its reference implementation for the plain layouts (Silero's 1-D
// decoder Conv to one channel), on the blocked kernels: never a reference step, and the
// reference kernel's values.
TEST(OptimizedPathTest, PointwiseConvs) {
  struct Case {
    Shape x, w;
  };
  for (const Case& c :
       {Case{Shape{1, 16, 5, 7}, Shape{8, 16, 1, 1}}, Case{Shape{1, 128, 1}, Shape{1, 128, 1}},
        Case{Shape{2, 3, 4}, Shape{5, 3, 1}}}) {
    SCOPED_TRACE(c.x.ToString() + " " + c.w.ToString());
    const Tensor w = Random(c.w, 100);
    const Tensor bias = Random(Shape{c.w[0]}, 101);
    Builder b;
    const ValueId x = b.Input("x", std::vector<int64_t>(c.x.dims().begin(), c.x.dims().end()));
    b.Output(b.Op("Conv", {x, b.Constant("w", w), b.Constant("b", bias)}, 11));
    const Tensor tx = Random(c.x, 102);
    const Tensor got = RunModel(b.shared(), {&tx});  // checks reference_steps == 0
    Tensor expected;
    ASSERT_TRUE(reference::Conv(tx, w, &bias, reference::WindowAttrs(), 1, expected).ok());
    ASSERT_EQ(got.shape(), expected.shape());
    for (int64_t i = 0; i < got.NumElements(); ++i) {
      EXPECT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-4) << "element " << i;
    }
  }
}

// A Loop body h' = h + Tanh(MatMul(E, W)) with E a computed value of the enclosing graph (an
// encoder output) and W a body constant: the MatMul and the Tanh are invariant and move before
// the Loop; the body keeps the Add. The model's answer is h0 + T tanh(E W), in double here.
TEST(HoistLoopInvariantsTest, InvariantNodesRunOnceBeforeTheLoop) {
  constexpr int64_t kTrips = 5;
  const Tensor w = Random(Shape{3, 4}, 110, -0.5f, 0.5f);
  auto outer = std::make_shared<Graph>();
  outer->name = "main";
  const ValueId m = outer->AddValue("M", TypeOf(DataType::kInt64, {}));
  const ValueId cond = outer->AddValue("cond", TypeOf(DataType::kBool, {}));
  const ValueId h0 = outer->AddValue("h0", TypeOf(DataType::kFloat32, {2, 4}));
  const ValueId x = outer->AddValue("x", TypeOf(DataType::kFloat32, {2, 3}));
  const ValueId e = outer->AddValue("e", TypeOf(DataType::kFloat32, {2, 3}));
  const ValueId h = outer->AddValue("h", TypeOf(DataType::kFloat32, {2, 4}));
  outer->inputs = {m, cond, h0, x};
  outer->outputs = {h};
  outer->nodes.push_back(BodyNode("Neg", {x}, e));  // computed: not a constant

  auto body = std::make_shared<Graph>();
  body->name = "body";
  const ValueId i = body->AddValue("i", TypeOf(DataType::kInt64, {}));
  const ValueId cond_in = body->AddValue("cond_in", TypeOf(DataType::kBool, {}));
  const ValueId h_in = body->AddValue("h_in", TypeOf(DataType::kFloat32, {2, 4}));
  const ValueId cond_out = body->AddValue("cond_out", TypeOf(DataType::kBool, {}));
  const ValueId h_out = body->AddValue("h_out", TypeOf(DataType::kFloat32, {2, 4}));
  const ValueId e_in = body->AddValue("e_in");
  body->captures.push_back({e_in, e});
  const ValueId w_c = body->AddValue("w");
  auto wt = std::make_shared<Tensor>();
  wt->CopyFrom(w);
  body->constants.push_back({w_c, wt});
  const ValueId ew = body->AddValue("ew");
  const ValueId t = body->AddValue("t");
  body->inputs = {i, cond_in, h_in};
  body->outputs = {cond_out, h_out};
  body->nodes = {BodyNode("Identity", {cond_in}, cond_out), BodyNode("MatMul", {e_in, w_c}, ew),
                 BodyNode("Tanh", {ew}, t), BodyNode("Add", {h_in, t}, h_out)};
  Node loop = CarriedStateLoop(body);
  loop.inputs = {m, cond, h0};
  loop.outputs = {h};
  loop.implicit_inputs = {e};
  outer->nodes.push_back(loop);

  Graph rewritten = *outer;
  std::vector<std::string> log;
  ASSERT_TRUE(HoistLoopInvariantsPass().Run(rewritten, TransformContext(), log).ok());
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(OpTypes(rewritten), (std::vector<std::string>{"Neg", "MatMul", "Tanh", "Loop"}));
  const Graph& new_body = *rewritten.nodes[3].attributes.at("body").graph;
  EXPECT_EQ(OpTypes(new_body), (std::vector<std::string>{"Identity", "Add"}));
  EXPECT_EQ(rewritten.nodes[3].implicit_inputs.size(), 3u);  // e, and the MatMul's and Tanh's

  Tensor tm(DataType::kInt64, Shape{});
  tm.mutable_data<int64_t>()[0] = kTrips;
  Tensor tc(DataType::kBool, Shape{});
  tc.mutable_data<bool>()[0] = true;
  const Tensor th = Random(Shape{2, 4}, 111), tx = Random(Shape{2, 3}, 112);
  const Tensor got = RunModel(outer, {&tm, &tc, &th, &tx});
  ASSERT_EQ(got.shape(), (Shape{2, 4}));
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      double dot = 0;
      for (int64_t k = 0; k < 3; ++k) {
        dot += -double{tx.data<float>()[r * 3 + k]} * w.data<float>()[k * 4 + c];
      }
      const double want = th.data<float>()[r * 4 + c] + kTrips * std::tanh(dot);
      EXPECT_NEAR(got.data<float>()[r * 4 + c], want, 1e-5) << r << "," << c;
    }
  }
}

// ConvTranspose (two groups) -> BatchNormalization -> Add become one ConvTranspose: each output
// channel's weights are spread over the input channels of its group. The answer is the unfolded
// nodes' through the reference kernels.
TEST(FoldIntoConvTest, ConvTransposeWithGroups) {
  const int64_t c_in = 4, group = 2, m = 6;
  const Tensor w = Random(Shape{c_in, m / group, 2, 2}, 120);
  const Tensor bias = Random(Shape{m}, 121);
  const Tensor scale = Random(Shape{m}, 122), beta = Random(Shape{m}, 123),
               mean = Random(Shape{m}, 124), var = Random(Shape{m}, 125, 0.2f, 3.0f);
  const Tensor add = Random(Shape{m, 1, 1}, 126);
  Builder b;
  const ValueId x = b.Input("x", {1, c_in, 3, 4});
  const ValueId up = b.Op("ConvTranspose", {x, b.Constant("w", w), b.Constant("b", bias)}, 11,
                          {{"strides", Ints({2, 2})}, {"group", IntAttr(group)}});
  const ValueId bn = b.Op("BatchNormalization",
                          {up, b.Constant("scale", scale), b.Constant("beta", beta),
                           b.Constant("mean", mean), b.Constant("var", var)},
                          15);
  b.Output(b.Op("Add", {bn, b.Constant("add", add)}));
  Builder copy;
  copy.graph() = b.graph();
  ASSERT_EQ(RunPass(FoldIntoConvPass(), copy).size(), 1u);
  EXPECT_EQ(OpTypes(copy.graph()), std::vector<std::string>{"ConvTranspose"});

  const Tensor tx = Random(Shape{1, c_in, 3, 4}, 127);
  const Tensor got = RunModel(b.shared(), {&tx});
  reference::ConvTransposeAttrs attrs;
  attrs.window.strides = {2, 2};
  attrs.group = group;
  Tensor up_ref, normalized;
  ASSERT_TRUE(reference::ConvTranspose(tx, w, &bias, attrs, up_ref).ok());
  ASSERT_TRUE(reference::BatchNorm(up_ref, scale, beta, mean, var, 1e-5f, normalized).ok());
  ASSERT_EQ(got.shape(), normalized.shape());
  const int64_t plane = got.NumElements() / m;
  for (int64_t i = 0; i < got.NumElements(); ++i) {
    const double want = double{normalized.data<float>()[i]} + add.data<float>()[i / plane];
    EXPECT_NEAR(got.data<float>()[i], want, 1e-4 * (1 + std::abs(want))) << "element " << i;
  }
}

// A graph output that folds to a constant is returned on every run with the spec's values (the
// run hands out a copy, the constant stays).
TEST(FoldConstantsTest, FoldedGraphOutputOnEveryRun) {
  Builder b;
  const ValueId x = b.Input("x", {3});
  const Tensor c = Random(Shape{3}, 130);
  const ValueId cc = b.Constant("c", c);
  b.Output(b.Op("Neg", {cc}));
  b.Output(b.Op("Add", {x, cc}));
  auto model = Model::FromGraph(b.shared());
  ASSERT_TRUE(model.ok()) << model.status();
  const Tensor tx = Random(Shape{3}, 131);
  for (int run = 0; run < 3; ++run) {
    std::vector<Value> feed;
    feed.push_back(Value(Tensor::ViewOf(tx)));
    absl::StatusOr<std::vector<Value>> out = (*model)->Run(std::move(feed), RunOptions());
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ((*out)[0].tensor().NumElements(), 3);
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ((*out)[0].tensor().data<float>()[i], -c.data<float>()[i]) << "run " << run;
      EXPECT_EQ((*out)[1].tensor().data<float>()[i], tx.data<float>()[i] + c.data<float>()[i]);
    }
  }
}

}  // namespace
}  // namespace loopserve::engine::transform
