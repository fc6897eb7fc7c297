// The optimizer's MatMul -> Add -> activation fusion (engine/transform/fuse_matmul,
// kFusedMatMulOp) against the unfused ops computed by the reference kernels, on random shapes,
// with addends that become the primitive's bias, full-matrix and broadcast addends (a native
// epilogue), and one that grows the result (the unfused nodes); proof that a fused chain is one
// oneDNN primitive and that no float step runs on a reference kernel.

#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

ValueType FloatType(int rank) {
  ValueType t;
  t.dtype = DataType::kFloat32;
  t.dims = std::vector<int64_t>(rank, -1);  // unknown dims: nothing is prepared at load
  return t;
}

Node MakeNode(const std::string& op, std::vector<ValueId> inputs, std::vector<ValueId> outputs) {
  Node n;
  n.name = op + "_" + std::to_string(outputs[0]);
  n.op_type = op;
  n.opset = 13;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

// y = act(MatMul(a, b) + bias) (bias first in the Add when `bias_first`); with `expose_sum` the
// Add's result is a graph output too, which must stop the fusion.
std::shared_ptr<const Model> Chain(int rank_a, int rank_b, int rank_bias, const std::string& act,
                                   bool bias_first, bool expose_sum) {
  auto g = std::make_shared<Graph>();
  const ValueId a = g->AddValue("a", FloatType(rank_a));
  const ValueId b = g->AddValue("b", FloatType(rank_b));
  const ValueId bias = g->AddValue("bias", FloatType(rank_bias));
  const ValueId product = g->AddValue("product");
  const ValueId sum = g->AddValue("sum");
  g->nodes.push_back(MakeNode("MatMul", {a, b}, {product}));
  g->nodes.push_back(MakeNode(
      "Add", bias_first ? std::vector<ValueId>{bias, product} : std::vector<ValueId>{product, bias},
      {sum}));
  ValueId y = sum;
  if (!act.empty()) {
    y = g->AddValue("y");
    g->nodes.push_back(MakeNode(act, {sum}, {y}));
  }
  g->inputs = {a, b, bias};
  g->outputs = {y};
  if (expose_sum && y != sum) g->outputs.push_back(sum);
  auto model = Model::FromGraph(g);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

Tensor Random(const Shape& shape, std::mt19937& rng) {
  Tensor t(DataType::kFloat32, shape);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* data = t.mutable_data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i) data[i] = dist(rng);
  return t;
}

Tensor Expected(const Tensor& a, const Tensor& b, const Tensor& bias, const std::string& act) {
  Tensor product, sum, y;
  EXPECT_TRUE(reference::MatMul(a, b, product).ok());
  EXPECT_TRUE(reference::Binary(reference::BinaryOp::kAdd, product, bias, sum).ok());
  if (act.empty()) return sum;
  const reference::UnaryOp op = act == "Tanh"   ? reference::UnaryOp::kTanh
                                : act == "Relu" ? reference::UnaryOp::kRelu
                                                : reference::UnaryOp::kSigmoid;
  EXPECT_TRUE(reference::Unary(op, sum, y).ok());
  return y;
}

void ExpectNear(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  const auto g = got.span<float>();
  const auto w = want.span<float>();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-4f) << "element " << i;
}

struct Case {
  Shape a, b, bias;
  std::string act;
  bool bias_first;
  bool expose_sum;
  int64_t primitives;  // oneDNN primitives the first run creates: 1 when fused
};

TEST(FusionTest, FusedChainMatchesTheUnfusedOps) {
  const Case cases[] = {
      // One row by non-constant weights: the native batched matrix-vector kernel, no primitive.
      {Shape{1, 256}, Shape{256, 256}, Shape{256}, "Tanh", false, false, 0},
      {Shape{16, 64}, Shape{64, 96}, Shape{1, 96}, "Relu", true, false, 1},
      {Shape{3, 5, 7}, Shape{7, 9}, Shape{9}, "Sigmoid", false, false, 1},
      // Addends that are not one row (a broadcast one, a full matrix as in an RNN cell's
      // x W + h U): the matmul primitive, then the addition and activation as its epilogue.
      {Shape{2, 3, 5, 7}, Shape{2, 1, 7, 9}, Shape{3, 1, 9}, "Tanh", false, false, 1},
      {Shape{4, 32}, Shape{32, 80}, Shape{4, 80}, "", false, false, 1},
      // An addend that grows the result: the nodes run unfused (MatMul on the native
      // matrix-vector kernel, native Add and Tanh).
      {Shape{1, 8}, Shape{8, 8}, Shape{5, 8}, "Tanh", false, false, 0},
      // The sum is also an output: MatMul + Add fuse; Tanh runs on its own, on native vector
      // math (256 elements: below kNativeElementwiseLimit, so no primitive).
      {Shape{2, 128}, Shape{128, 128}, Shape{128}, "Tanh", false, true, 1},
  };
  std::mt19937 rng(3);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.a.ToString() + " x " + c.b.ToString() + " + " + c.bias.ToString() + " " + c.act);
    auto model = Chain(c.a.rank(), c.b.rank(), c.bias.rank(), c.act, c.bias_first, c.expose_sum);
    ASSERT_NE(model, nullptr);
    const Tensor a = Random(c.a, rng), b = Random(c.b, rng), bias = Random(c.bias, rng);
    for (int run = 0; run < 2; ++run) {
      std::vector<Value> in;
      in.push_back(Value(Tensor::ViewOf(a)));
      in.push_back(Value(Tensor::ViewOf(b)));
      in.push_back(Value(Tensor::ViewOf(bias)));
      const int64_t before = DnnlPrimitiveCreationCount();
      RunStats stats;
      auto out = model->Run(std::move(in), RunOptions(), &stats);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(DnnlPrimitiveCreationCount() - before, run == 0 ? c.primitives : 0);
      EXPECT_EQ(stats.reference_steps, 0);
      ExpectNear((*out)[0].tensor(), Expected(a, b, bias, c.act));
    }
  }
}

// MatMul weights that are a constant are reordered once into oneDNN's preferred (blocked) layout
// when the signature is prepared; the result must not change, fused or not.
TEST(FusionTest, ConstantWeightsArePackedAndGiveTheSameResult) {
  std::mt19937 rng(5);
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "plain");
    const Tensor w = Random(Shape{256, 512}, rng);
    const Tensor bias = Random(Shape{512}, rng);
    auto g = std::make_shared<Graph>();
    const ValueId a = g->AddValue("a", FloatType(2));
    const ValueId wid = g->AddValue("w");
    const ValueId bid = g->AddValue("bias");
    const ValueId product = g->AddValue("product");
    g->constants.emplace_back(wid, std::make_shared<Tensor>(Tensor::ViewOf(w)));
    g->constants.emplace_back(bid, std::make_shared<Tensor>(Tensor::ViewOf(bias)));
    g->nodes.push_back(MakeNode("MatMul", {a, wid}, {product}));
    ValueId y = product;
    if (fused) {
      y = g->AddValue("y");
      g->nodes.push_back(MakeNode("Add", {product, bid}, {y}));
    }
    g->inputs = {a};
    g->outputs = {y};
    auto model = Model::FromGraph(g);
    ASSERT_TRUE(model.ok()) << model.status();
    for (const int64_t rows : {1, 3, 1}) {
      const Tensor in = Random(Shape{rows, 256}, rng);
      std::vector<Value> feed;
      feed.push_back(Value(Tensor::ViewOf(in)));
      auto out = (*model)->Run(std::move(feed), RunOptions());
      ASSERT_TRUE(out.ok()) << out.status();
      Tensor want;
      ASSERT_TRUE(reference::MatMul(in, w, want).ok());
      if (fused) {
        Tensor sum;
        ASSERT_TRUE(reference::Binary(reference::BinaryOp::kAdd, want, bias, sum).ok());
        want = std::move(sum);
      }
      ExpectNear((*out)[0].tensor(), want);
    }
  }
}

// Elementwise chains (kFusedBinaryOp): one binary primitive with post-ops above the small-tensor
// limit, in-place reference loops below it, the unfused ops where operands broadcast; always the
// values of the separate ops.
TEST(FusionTest, ElementwiseChainsMatchTheSeparateOps) {
  struct Chain2 {
    const char* op;
    const char* op2;
    bool chain_first;  // the chain's value is op2's first operand
    const char* act;
    Shape a, b, c;
  };
  const Chain2 cases[] = {
      {"Mul", "Add", true, "Tanh", Shape{4, 1024}, Shape{4, 1024}, Shape{4, 1024}},
      {"Mul", "Add", false, "Tanh", Shape{4, 1024}, Shape{4, 1024}, Shape{4, 1024}},
      {"Sub", "Div", true, "Sigmoid", Shape{2048}, Shape{2048}, Shape{2048}},
      {"Add", "Sub", false, "Relu", Shape{3000}, Shape{3000}, Shape{3000}},  // not op2-fusable
      {"Mul", "Add", true, "Tanh", Shape{16}, Shape{16}, Shape{16}},     // small: reference loops
      {"Add", "Mul", true, "", Shape{4, 600}, Shape{600}, Shape{4, 1}},  // broadcasts
      {"Div", "", true, "Relu", Shape{5000}, Shape{5000}, Shape{}},
  };
  std::mt19937 rng(11);
  for (const Chain2& c : cases) {
    SCOPED_TRACE(std::string(c.op) + " " + c.op2 + " " + c.act + " " + c.a.ToString());
    auto g = std::make_shared<Graph>();
    const ValueId a = g->AddValue("a", FloatType(c.a.rank()));
    const ValueId b = g->AddValue("b", FloatType(c.b.rank()));
    const ValueId cc = g->AddValue("c", FloatType(c.c.rank()));
    const ValueId first = g->AddValue("first");
    g->nodes.push_back(MakeNode(c.op, {a, b}, {first}));
    ValueId y = first;
    const bool has_op2 = std::string(c.op2).size() > 0;
    if (has_op2) {
      y = g->AddValue("second");
      g->nodes.push_back(MakeNode(
          c.op2, c.chain_first ? std::vector<ValueId>{first, cc} : std::vector<ValueId>{cc, first},
          {y}));
    }
    if (std::string(c.act).size() > 0) {
      const ValueId z = g->AddValue("z");
      g->nodes.push_back(MakeNode(c.act, {y}, {z}));
      y = z;
    }
    g->inputs = {a, b, cc};
    g->outputs = {y};
    auto model = Model::FromGraph(g);
    ASSERT_TRUE(model.ok()) << model.status();
    const Tensor ta = Random(c.a, rng), tb = Random(c.b, rng);
    Tensor tc = Random(c.c, rng);
    if (std::string(c.op2) == "Div") {  // keep divisors away from 0
      float* p = tc.mutable_data<float>();
      for (int64_t i = 0; i < tc.NumElements(); ++i) p[i] = 1.5f + p[i];
    }
    std::vector<Value> in;
    in.push_back(Value(Tensor::ViewOf(ta)));
    in.push_back(Value(Tensor::ViewOf(tb)));
    in.push_back(Value(Tensor::ViewOf(tc)));
    auto out = (*model)->Run(std::move(in), RunOptions());
    ASSERT_TRUE(out.ok()) << out.status();
    auto binary = [](const std::string& name) {
      return name == "Add"   ? reference::BinaryOp::kAdd
             : name == "Sub" ? reference::BinaryOp::kSub
             : name == "Mul" ? reference::BinaryOp::kMul
                             : reference::BinaryOp::kDiv;
    };
    Tensor want, tmp;
    ASSERT_TRUE(reference::Binary(binary(c.op), ta, tb, want).ok());
    if (has_op2) {
      ASSERT_TRUE((c.chain_first ? reference::Binary(binary(c.op2), want, tc, tmp)
                                 : reference::Binary(binary(c.op2), tc, want, tmp))
                      .ok());
      want = std::move(tmp);
    }
    if (std::string(c.act).size() > 0) {
      const reference::UnaryOp op = std::string(c.act) == "Tanh"   ? reference::UnaryOp::kTanh
                                    : std::string(c.act) == "Relu" ? reference::UnaryOp::kRelu
                                                                   : reference::UnaryOp::kSigmoid;
      ASSERT_TRUE(reference::Unary(op, want, tmp).ok());
      want = std::move(tmp);
    }
    ExpectNear((*out)[0].tensor(), want);
  }
}

}  // namespace
}  // namespace loopserve::engine

namespace loopserve::engine {
namespace {

// Gemm -> activation (nn.Linear as exporters write it, then Tanh/Relu/Sigmoid): the compiler folds
// the activation into the Gemm; with a constant B the weights are packed once, and a one-row
// product with beta 0 or 1 runs on the packed one-row kernel. Every combination of transposes,
// alpha, beta, C shape and row count must give the reference Gemm followed by the activation.
TEST(FusionTest, GemmWithActivationMatchesTheReference) {
  std::mt19937 rng(17);
  const int64_t k = 40, n = 136;  // n: one full 128-column panel and a tail
  int checked = 0;
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      for (const float alpha : {1.0f, 0.5f}) {
        for (const float beta : {1.0f, 0.7f, 0.0f}) {
          for (const int c_rank : {0, 1, 2}) {  // 0: no C
            for (const std::string act : {"Tanh", "Relu", "Sigmoid"}) {
              SCOPED_TRACE(::testing::Message()
                           << "transA=" << trans_a << " transB=" << trans_b << " alpha=" << alpha
                           << " beta=" << beta << " c_rank=" << c_rank << " " << act);
              const Tensor b = Random(trans_b ? Shape{n, k} : Shape{k, n}, rng);
              const Tensor c = Random(c_rank == 2 ? Shape{1, n} : Shape{n}, rng);
              auto g = std::make_shared<Graph>();
              const ValueId a = g->AddValue("a", FloatType(2));
              const ValueId bid = g->AddValue("b");
              const ValueId cid = g->AddValue("c");
              const ValueId y = g->AddValue("y");
              const ValueId z = g->AddValue("z");
              g->constants.emplace_back(bid, std::make_shared<Tensor>(Tensor::ViewOf(b)));
              g->constants.emplace_back(cid, std::make_shared<Tensor>(Tensor::ViewOf(c)));
              Node gemm = MakeNode("Gemm", {a, bid}, {y});
              if (c_rank > 0) gemm.inputs.push_back(cid);
              Attribute f;
              f.type = Attribute::Type::kFloat;
              f.f = alpha;
              gemm.attributes["alpha"] = f;
              f.f = beta;
              gemm.attributes["beta"] = f;
              Attribute i;
              i.type = Attribute::Type::kInt;
              i.i = trans_a ? 1 : 0;
              gemm.attributes["transA"] = i;
              i.i = trans_b ? 1 : 0;
              gemm.attributes["transB"] = i;
              g->nodes.push_back(gemm);
              g->nodes.push_back(MakeNode(act, {y}, {z}));
              g->inputs = {a};
              g->outputs = {z};
              auto model = Model::FromGraph(g);
              ASSERT_TRUE(model.ok()) << model.status();
              for (const int64_t rows : {1, 3}) {
                const Tensor in = Random(trans_a ? Shape{k, rows} : Shape{rows, k}, rng);
                std::vector<Value> feed;
                feed.push_back(Value(Tensor::ViewOf(in)));
                const int64_t primitives = DnnlPrimitiveCreationCount();
                auto out = (*model)->Run(std::move(feed), RunOptions());
                ASSERT_TRUE(out.ok()) << out.status();
                if (rows == 1 && (beta == 0.0f || beta == 1.0f || c_rank == 0) &&
                    native::PackedGemv::Available()) {
                  EXPECT_EQ(DnnlPrimitiveCreationCount(), primitives) << "not the packed kernel";
                }
                reference::GemmAttrs attrs;
                attrs.alpha = alpha;
                attrs.beta = beta;
                attrs.trans_a = trans_a;
                attrs.trans_b = trans_b;
                Tensor product, want;
                ASSERT_TRUE(reference::Gemm(in, b, c_rank > 0 ? &c : nullptr, attrs, product).ok());
                const reference::UnaryOp op = act == "Tanh"   ? reference::UnaryOp::kTanh
                                              : act == "Relu" ? reference::UnaryOp::kRelu
                                                              : reference::UnaryOp::kSigmoid;
                ASSERT_TRUE(reference::Unary(op, product, want).ok());
                ExpectNear((*out)[0].tensor(), want);
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 2 * 2 * 3 * 3 * 3 * 2);
}

}  // namespace
}  // namespace loopserve::engine
