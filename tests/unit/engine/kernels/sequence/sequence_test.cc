// Sequence and optional kernels: SequenceEmpty/Construct/Insert/At/Erase/Length,
// ConcatFromSequence, SplitToSequence, Optional*, SequenceMap, and sequences through Loop and If.
// Expected values follow the ONNX spec examples or are worked out by hand.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/ir/graph.h"
#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

template <typename T>
Tensor Make(const Shape& shape, std::vector<T> values) {
  Tensor t(DataTypeOf<T>::value, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.NumElements());
  for (size_t i = 0; i < values.size(); ++i) t.mutable_data<T>()[i] = values[i];
  return t;
}

template <typename... V>
std::vector<Value> Vals(V&&... v) {
  std::vector<Value> out;
  (out.push_back(std::forward<V>(v)), ...);
  return out;
}

Value Seq(std::vector<Tensor> elements) {
  Value v;
  std::vector<Tensor>& s = v.mutable_sequence();
  for (Tensor& t : elements) s.push_back(std::move(t));
  return v;
}

template <typename T>
void ExpectTensor(const Tensor& t, const Shape& shape, std::vector<T> values) {
  ASSERT_EQ(t.dtype(), DataTypeOf<T>::value);
  ASSERT_EQ(t.shape(), shape) << t.shape().ToString();
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(t.data<T>()[i], values[i]) << i;
}

Attribute IntAttr(int64_t v) {
  Attribute a;
  a.type = Attribute::Type::kInt;
  a.i = v;
  return a;
}

// A graph under construction: values by name, nodes in order.
class GraphBuilder {
 public:
  GraphBuilder() : graph_(std::make_shared<Graph>()) { graph_->name = "test"; }

  GraphBuilder& Input(const std::string& name) {
    graph_->inputs.push_back(Id(name));
    return *this;
  }
  GraphBuilder& Output(const std::string& name) {
    graph_->outputs.push_back(Id(name));
    return *this;
  }
  GraphBuilder& Op(const std::string& op, std::vector<std::string> inputs,
                   std::vector<std::string> outputs,
                   std::vector<std::pair<std::string, Attribute>> attrs = {}, int opset = 17) {
    Node node;
    node.name = absl::StrCat(op, "_", graph_->nodes.size());
    node.op_type = op;
    node.opset = opset;
    for (const std::string& in : inputs) node.inputs.push_back(in.empty() ? kNoValue : Id(in));
    for (const std::string& out : outputs) node.outputs.push_back(Id(out));
    for (auto& [name, a] : attrs) node.attributes[name] = a;
    graph_->nodes.push_back(std::move(node));
    return *this;
  }
  GraphBuilder& Const(const std::string& name, Tensor t) {
    graph_->constants.emplace_back(Id(name), std::make_shared<const Tensor>(std::move(t)));
    return *this;
  }
  std::shared_ptr<Graph> graph() { return graph_; }

 private:
  ValueId Id(const std::string& name) {
    for (size_t i = 0; i < graph_->values.size(); ++i) {
      if (graph_->values[i].name == name) return static_cast<ValueId>(i);
    }
    return graph_->AddValue(name, ValueType::Unknown());
  }
  std::shared_ptr<Graph> graph_;
};

absl::StatusOr<std::vector<Value>> Run(GraphBuilder& b, std::vector<Value> inputs) {
  auto model = Model::FromGraph(b.graph());
  if (!model.ok()) return model.status();
  return (*model)->Run(std::move(inputs), RunOptions());
}

std::vector<Value> RunOk(GraphBuilder& b, std::vector<Value> inputs) {
  absl::StatusOr<std::vector<Value>> out = Run(b, std::move(inputs));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<Value>();
}

void ExpectError(GraphBuilder& b, std::vector<Value> inputs, const std::string& fragment) {
  absl::StatusOr<std::vector<Value>> out = Run(b, std::move(inputs));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  EXPECT_NE(std::string(out.status().message()).find(fragment), std::string::npos) << out.status();
}

TEST(SequenceTest, ConstructInsertAtEraseLength) {
  GraphBuilder b;
  b.Input("a").Input("b").Input("pos");
  b.Op("SequenceConstruct", {"a", "b"}, {"s"});
  b.Op("SequenceInsert", {"s", "a", "pos"}, {"s2"});  // insert at 1: [a, a, b]
  b.Op("SequenceErase", {"s2"}, {"s3"});              // drop the last: [a, a]
  b.Op("SequenceLength", {"s2"}, {"len"});
  b.Op("SequenceAt", {"s2", "pos"}, {"at"});
  b.Output("s2").Output("s3").Output("len").Output("at");
  std::vector<Value> out =
      RunOk(b, Vals(Value(Make<float>({1}, {1})), Value(Make<float>({2}, {2, 3})),
                    Value(Make<int64_t>({}, {-2}))));
  ASSERT_EQ(out.size(), 4u);
  ASSERT_TRUE(out[0].is_sequence());
  ASSERT_EQ(out[0].sequence().size(), 3u);
  ExpectTensor<float>(out[0].sequence()[1], {1}, {1});
  ExpectTensor<float>(out[0].sequence()[2], {2}, {2, 3});
  ASSERT_EQ(out[1].sequence().size(), 2u);
  ExpectTensor<float>(out[1].sequence()[1], {1}, {1});
  ExpectTensor<int64_t>(out[2].tensor(), {}, {3});
  ExpectTensor<float>(out[3].tensor(), {1}, {1});  // position -2 of 3 is element 1
}

TEST(SequenceTest, EmptyAndErrors) {
  GraphBuilder b;
  b.Input("pos");
  b.Op("SequenceEmpty", {}, {"s"}, {{"dtype", IntAttr(1)}});
  b.Op("SequenceAt", {"s", "pos"}, {"at"});
  b.Output("at");
  ExpectError(b, Vals(Value(Make<int64_t>({}, {0}))), "out of range");

  GraphBuilder c;
  c.Input("s").Input("t");
  c.Op("SequenceInsert", {"s", "t"}, {"o"});
  c.Output("o");
  ASSERT_EQ(RunOk(c, Vals(Seq({}), Value(Make<float>({1}, {1}))))[0].sequence().size(), 1u);
  GraphBuilder d;
  d.Input("s").Input("t");
  d.Op("SequenceInsert", {"s", "t"}, {"o"});
  d.Output("o");
  std::vector<Tensor> elems;
  elems.push_back(Make<int32_t>({1}, {1}));
  ExpectError(d, Vals(Seq(std::move(elems)), Value(Make<float>({1}, {1}))), "element type float32");
  GraphBuilder e;
  e.Input("t");
  e.Op("SequenceLength", {"t"}, {"o"});
  e.Output("o");
  ExpectError(e, Vals(Value(Make<float>({1}, {1}))), "must be a sequence");
}

TEST(SequenceTest, ConcatFromSequence) {
  auto seq = [] {
    std::vector<Tensor> e;
    e.push_back(Make<int32_t>({2, 1}, {1, 2}));
    e.push_back(Make<int32_t>({2, 1}, {3, 4}));
    return Seq(std::move(e));
  };
  GraphBuilder b;
  b.Input("s");
  b.Op("ConcatFromSequence", {"s"}, {"c1"}, {{"axis", IntAttr(1)}});
  b.Op("ConcatFromSequence", {"s"}, {"c2"}, {{"axis", IntAttr(-1)}, {"new_axis", IntAttr(1)}});
  b.Op("ConcatFromSequence", {"s"}, {"c0"}, {{"axis", IntAttr(0)}, {"new_axis", IntAttr(1)}});
  b.Output("c1").Output("c2").Output("c0");
  std::vector<Value> out = RunOk(b, Vals(seq()));
  ASSERT_EQ(out.size(), 3u);
  ExpectTensor<int32_t>(out[0].tensor(), {2, 2}, {1, 3, 2, 4});
  ExpectTensor<int32_t>(out[1].tensor(), {2, 1, 2}, {1, 3, 2, 4});
  ExpectTensor<int32_t>(out[2].tensor(), {2, 2, 1}, {1, 2, 3, 4});
}

TEST(SequenceTest, SplitToSequence) {
  GraphBuilder b;
  b.Input("x").Input("two").Input("lens");
  b.Op("SplitToSequence", {"x", "two"}, {"a"}, {{"axis", IntAttr(1)}});
  b.Op("SplitToSequence", {"x", "lens"}, {"b"});
  b.Op("SplitToSequence", {"x"}, {"c"}, {{"keepdims", IntAttr(0)}});
  b.Output("a").Output("b").Output("c");
  // x = [[1,2,3],[4,5,6]]
  std::vector<Value> out =
      RunOk(b, Vals(Value(Make<float>({2, 3}, {1, 2, 3, 4, 5, 6})), Value(Make<int64_t>({}, {2})),
                    Value(Make<int32_t>({2}, {1, 1}))));
  ASSERT_EQ(out.size(), 3u);
  ASSERT_EQ(out[0].sequence().size(), 2u);  // widths 2 and 1
  ExpectTensor<float>(out[0].sequence()[0], {2, 2}, {1, 2, 4, 5});
  ExpectTensor<float>(out[0].sequence()[1], {2, 1}, {3, 6});
  ASSERT_EQ(out[1].sequence().size(), 2u);
  ExpectTensor<float>(out[1].sequence()[1], {1, 3}, {4, 5, 6});
  ASSERT_EQ(out[2].sequence().size(), 2u);
  ExpectTensor<float>(out[2].sequence()[0], {3}, {1, 2, 3});
}

TEST(OptionalTest, HasGetAndIdentity) {
  GraphBuilder b;
  b.Input("opt");
  b.Op("OptionalHasElement", {"opt"}, {"has"}, {}, 15);
  b.Op("Identity", {"opt"}, {"same"}, {}, 16);
  b.Output("has").Output("same");
  std::vector<Value> empty = RunOk(b, Vals(Value()));
  ASSERT_EQ(empty.size(), 2u);
  ExpectTensor<bool>(empty[0].tensor(), {}, {false});
  EXPECT_TRUE(empty[1].is_none());
  std::vector<Value> full = RunOk(b, Vals(Value(Make<float>({1}, {5}))));
  ExpectTensor<bool>(full[0].tensor(), {}, {true});

  GraphBuilder g;
  g.Input("opt");
  g.Op("OptionalGetElement", {"opt"}, {"v"}, {}, 15);
  g.Output("v");
  ExpectError(g, Vals(Value()), "empty");
  std::vector<Value> got = RunOk(g, Vals(Value(Make<float>({1}, {5}))));
  ExpectTensor<float>(got[0].tensor(), {1}, {5});

  GraphBuilder o;
  o.Input("x");
  o.Op("Optional", {""}, {"none"}, {}, 15);
  o.Op("Optional", {"x"}, {"some"}, {}, 15);
  o.Op("OptionalHasElement", {"none"}, {"h0"}, {}, 15);
  o.Op("OptionalHasElement", {"some"}, {"h1"}, {}, 15);
  o.Output("h0").Output("h1");
  std::vector<Value> h = RunOk(o, Vals(Value(Make<float>({1}, {5}))));
  ExpectTensor<bool>(h[0].tensor(), {}, {false});
  ExpectTensor<bool>(h[1].tensor(), {}, {true});
}

TEST(OptionalTest, KernelsWithoutSupportRejectEmptyOptionals) {
  GraphBuilder b;
  b.Input("opt");
  b.Op("Shape", {"opt"}, {"s"});
  b.Output("s");
  ExpectError(b, Vals(Value()), "has no value");
}

// A Loop whose carried value starts as an empty optional and leaves as a sequence (as in the
// ONNX test_loop16_seq_none): each iteration appends the iteration number.
TEST(SequenceTest, LoopCarriesOptionalIntoSequence) {
  auto body = std::make_shared<Graph>();
  GraphBuilder bb;
  bb.Input("i").Input("cond_in").Input("opt_in");
  bb.Op("Identity", {"cond_in"}, {"cond_out"});
  bb.Op("OptionalHasElement", {"opt_in"}, {"has"}, {}, 16);
  bb.Op("If", {"has"}, {"seq"}, {}, 16);
  bb.Op("SequenceInsert", {"seq", "i"}, {"seq_out"}, {}, 16);
  bb.Output("cond_out").Output("seq_out");
  std::shared_ptr<Graph> body_graph = bb.graph();
  // If branches: then -> OptionalGetElement(opt_in) (captured), else -> SequenceEmpty.
  {
    auto then_g = std::make_shared<Graph>();
    const ValueId inner = then_g->AddValue("opt_in", ValueType::Unknown());
    then_g->captures.push_back(Capture{inner, 2});  // body value 2 is opt_in
    const ValueId out = then_g->AddValue("s", ValueType::Unknown());
    Node n;
    n.name = "get";
    n.op_type = "OptionalGetElement";
    n.opset = 16;
    n.inputs = {inner};
    n.outputs = {out};
    then_g->nodes.push_back(n);
    then_g->outputs.push_back(out);
    auto else_g = std::make_shared<Graph>();
    const ValueId e = else_g->AddValue("s", ValueType::Unknown());
    Node m;
    m.name = "empty";
    m.op_type = "SequenceEmpty";
    m.opset = 16;
    m.outputs = {e};
    else_g->nodes.push_back(m);
    else_g->outputs.push_back(e);
    Node& if_node = body_graph->nodes[2];
    Attribute t;
    t.type = Attribute::Type::kGraph;
    t.graph = then_g;
    Attribute f = t;
    f.graph = else_g;
    if_node.attributes["then_branch"] = t;
    if_node.attributes["else_branch"] = f;
  }
  ASSERT_EQ(body_graph->ValueName(2), "opt_in");

  GraphBuilder b;
  b.Input("m").Input("opt");
  b.Op("Loop", {"m", "", "opt"}, {"result"}, {}, 16);
  b.Output("result");
  std::shared_ptr<Graph> g = b.graph();
  Node& loop = g->nodes[0];
  Attribute body_attr;
  body_attr.type = Attribute::Type::kGraph;
  body_attr.graph = body_graph;
  loop.attributes["body"] = body_attr;
  auto spec = std::make_shared<LoopSpec>();
  spec->negative_trip_count = LoopSpec::NegativeTripCount::kZeroIterations;
  spec->current_iteration_param = 0;
  spec->condition_result = 0;
  for (int j = -1; j < 1; ++j) {
    LoopSpec::InputPort port;
    port.kind = LoopSpec::InputPort::Kind::kCarried;
    port.node_input = 2 + j;
    port.body_param = 2 + j;
    port.back_edge = 1 + j;
    spec->inputs.push_back(port);
  }
  LoopSpec::OutputPort out_port;
  out_port.node_output = 0;
  out_port.body_result = 1;
  out_port.kind = LoopSpec::OutputPort::Kind::kLastValue;
  spec->outputs.push_back(out_port);
  loop.loop = spec;

  std::vector<Value> out = RunOk(b, Vals(Value(Make<int64_t>({}, {3})), Value()));
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].is_sequence());
  ASSERT_EQ(out[0].sequence().size(), 3u);
  for (int64_t i = 0; i < 3; ++i) ExpectTensor<int64_t>(out[0].sequence()[i], {}, {i});
}

TEST(SequenceTest, SequenceMapAddsTensorToEachElement) {
  auto body = std::make_shared<Graph>();
  const ValueId x = body->AddValue("x", ValueType::Unknown());
  const ValueId y = body->AddValue("y", ValueType::Unknown());
  const ValueId z = body->AddValue("z", ValueType::Unknown());
  body->inputs = {x, y};
  body->outputs = {z};
  Node add;
  add.name = "add";
  add.op_type = "Sum";
  add.opset = 13;
  add.inputs = {x, y};
  add.outputs = {z};
  body->nodes.push_back(add);
  GraphBuilder b;
  b.Input("s").Input("t");
  b.Op("SequenceMap", {"s", "t"}, {"o"});
  b.Output("o");
  Attribute a;
  a.type = Attribute::Type::kGraph;
  a.graph = body;
  b.graph()->nodes[0].attributes["body"] = a;
  std::vector<Tensor> e;
  e.push_back(Make<float>({2}, {1, 2}));
  e.push_back(Make<float>({2}, {3, 4}));
  std::vector<Value> out = RunOk(b, Vals(Seq(std::move(e)), Value(Make<float>({2}, {10, 20}))));
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].sequence().size(), 2u);
  ExpectTensor<float>(out[0].sequence()[0], {2}, {11, 22});
  ExpectTensor<float>(out[0].sequence()[1], {2}, {13, 24});
}

}  // namespace
}  // namespace loopserve::engine
