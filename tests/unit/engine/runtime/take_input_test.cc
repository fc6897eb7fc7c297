// Step::takeable_inputs (Plan::Compile) and KernelContext::TakeInput: which inputs a kernel may
// update in place, and that ScatterND and Concat then write into the input's buffer (same address)
// with the values the ops' definitions give, computed here by hand, and copy otherwise.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/run_context.h"
#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

class GraphBuilder {
 public:
  GraphBuilder() : g_(std::make_shared<Graph>()) { g_->name = "g"; }
  ValueId Input(const std::string& name) {
    const ValueId v = g_->AddValue(name);
    g_->inputs.push_back(v);
    return v;
  }
  ValueId Constant(const std::string& name, Tensor value) {
    const ValueId v = g_->AddValue(name);
    g_->constants.push_back({v, std::make_shared<Tensor>(std::move(value))});
    return v;
  }
  ValueId Op(const std::string& op, std::vector<ValueId> inputs, int64_t axis = -1) {
    Node n;
    n.op_type = op;
    n.name = op + std::to_string(g_->nodes.size());
    n.opset = 13;
    n.inputs = std::move(inputs);
    if (axis >= 0) {
      Attribute a;
      a.type = Attribute::Type::kInt;
      a.i = axis;
      n.attributes["axis"] = a;
    }
    const ValueId out = g_->AddValue(n.name + "_out");
    n.outputs = {out};
    g_->nodes.push_back(std::move(n));
    return out;
  }
  void Output(ValueId v) { g_->outputs.push_back(v); }
  std::shared_ptr<Graph> graph() { return g_; }

 private:
  std::shared_ptr<Graph> g_;
};

Tensor Floats(const Shape& shape, std::vector<float> values) {
  Tensor t(DataType::kFloat32, shape);
  std::memcpy(t.mutable_raw_data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Int64s(const Shape& shape, std::vector<int64_t> values) {
  Tensor t(DataType::kInt64, shape);
  std::memcpy(t.mutable_raw_data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

std::vector<float> Values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.NumElements());
}

// Compiles `graph` as a subgraph (depth 1: its inputs are a Loop body's parameters) or as the
// top-level graph.
std::shared_ptr<const Plan> Compile(std::shared_ptr<Graph> graph, bool subgraph) {
  CompileContext compile(KernelRegistry::Builtin());
  compile.set_transforms(false);
  if (subgraph) compile.set_depth(1);
  auto plan = Plan::Compile(std::move(graph), compile);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : nullptr;
}

TEST(TakeableInputsTest, OnlySoleReadersOfValuesTheFrameOwns) {
  GraphBuilder b;
  const ValueId x = b.Input("x");
  const ValueId rows = b.Input("rows");
  const ValueId idx = b.Constant("idx", Int64s({1, 1}, {0}));
  const ValueId a = b.Op("Neg", {x});                   // a: read once, below
  const ValueId s = b.Op("ScatterND", {a, idx, rows});  // takes a; idx is a constant
  const ValueId twice = b.Op("Neg", {s});               // read by two steps
  const ValueId sum = b.Op("Add", {twice, twice});      // the same slot twice in one step
  const ValueId out = b.Op("Neg", {sum});               // sum: read once
  const ValueId shown = b.Op("Neg", {twice});           // a graph output, read below
  const ValueId last = b.Op("Concat", {shown, out}, 0);
  b.Output(shown);
  b.Output(last);

  for (bool subgraph : {false, true}) {
    std::shared_ptr<const Plan> plan = Compile(b.graph(), subgraph);
    ASSERT_NE(plan, nullptr);
    const std::vector<Step>& steps = plan->steps();
    ASSERT_EQ(steps.size(), 7u);
    // Neg(x): x is a graph input, takeable only in a subgraph (a Loop body's parameter).
    EXPECT_EQ(steps[0].takeable_inputs, subgraph ? 1u : 0u) << subgraph;
    // ScatterND(a, constant, rows): `rows`, input 2, is a graph input read only here.
    EXPECT_EQ(steps[1].takeable_inputs, subgraph ? 5u : 1u) << subgraph;
    EXPECT_EQ(steps[2].takeable_inputs, 1u);  // Neg(s)
    EXPECT_EQ(steps[3].takeable_inputs, 0u);  // Add(twice, twice)
    EXPECT_EQ(steps[4].takeable_inputs, 1u);  // Neg(sum)
    EXPECT_EQ(steps[5].takeable_inputs, 0u);  // Neg(twice): twice has two readers
    EXPECT_EQ(steps[6].takeable_inputs, 2u);  // Concat(shown: a graph output, out)
  }
}

TEST(TakeableInputsTest, CapturesAndImplicitReadsAreNotTakeable) {
  GraphBuilder b;
  const ValueId x = b.Input("x");
  const ValueId a = b.Op("Neg", {x});
  const ValueId y = b.Op("Neg", {a});
  b.Output(y);
  std::shared_ptr<Graph> g = b.graph();
  // `a` is also read by a subgraph of some node (its Capture's outer value).
  g->nodes[1].implicit_inputs.push_back(a);
  // `x` stands for a value of the enclosing graph.
  g->captures.push_back(Capture{x, 0});
  g->inputs.clear();
  std::shared_ptr<const Plan> plan = Compile(g, /*subgraph=*/true);
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->steps()[0].takeable_inputs, 0u) << "a capture";
  EXPECT_EQ(plan->steps()[1].takeable_inputs, 0u) << "also read by a subgraph";
}

// Runs ScatterND(data, [[1]], rows) in a Loop-body-like plan with `data` owned by the frame, and
// then with `data` a view (which must not be written).
TEST(TakeInputTest, ScatterNDUpdatesAnOwnedArrayInPlace) {
  GraphBuilder b;
  const ValueId data = b.Input("data");
  const ValueId rows = b.Input("rows");
  const ValueId idx = b.Constant("idx", Int64s({1, 1}, {1}));
  const ValueId y = b.Op("ScatterND", {data, idx, rows});
  b.Output(y);
  std::shared_ptr<const Plan> plan = Compile(b.graph(), /*subgraph=*/true);
  ASSERT_NE(plan, nullptr);
  RunOptions options;
  RunContext context(options);
  ExecutionFrame frame(*plan, context);

  frame.slot(data).mutable_tensor() = Floats({3, 2}, {1, 2, 3, 4, 5, 6});
  frame.slot(rows).mutable_tensor() = Floats({1, 2}, {-7, -8});
  const void* buffer = frame.slot(data).tensor().raw_data();
  ASSERT_TRUE(frame.Run().ok());
  const Tensor& out = frame.slot(y).tensor();
  EXPECT_EQ(out.raw_data(), buffer) << "the owned array was copied instead of updated in place";
  EXPECT_EQ(out.shape(), Shape({3, 2}));
  EXPECT_EQ(Values(out), (std::vector<float>{1, 2, -7, -8, 5, 6}));

  const Tensor source = Floats({3, 2}, {1, 2, 3, 4, 5, 6});
  frame.slot(data).mutable_tensor() = Tensor::ViewOf(source);
  ASSERT_TRUE(frame.Run().ok());
  EXPECT_NE(frame.slot(y).tensor().raw_data(), source.raw_data());
  EXPECT_EQ(Values(frame.slot(y).tensor()), (std::vector<float>{1, 2, -7, -8, 5, 6}));
  EXPECT_EQ(Values(source), (std::vector<float>{1, 2, 3, 4, 5, 6})) << "a view was written";
}

// Concat(state, row) along axis 1 of a [1, n, 2] state (the state is a prefix of the result) and
// along axis 2 of a [2, n, 1] state (its rows move apart) appends in the state's buffer, grown
// geometrically.
TEST(TakeInputTest, ConcatAppendsInPlaceWhenTheStateIsAPrefix) {
  for (int64_t axis : {1, 2}) {
    GraphBuilder b;
    const ValueId state = b.Input("state");
    const ValueId row = b.Input("row");
    const ValueId y = b.Op("Concat", {state, row}, axis);
    b.Output(y);
    std::shared_ptr<const Plan> plan = Compile(b.graph(), /*subgraph=*/true);
    ASSERT_NE(plan, nullptr);
    RunOptions options;
    RunContext context(options);
    ExecutionFrame frame(*plan, context);
    Tensor current = axis == 1 ? Floats({1, 1, 2}, {0, 1}) : Floats({2, 1, 1}, {0, 1});
    std::vector<std::vector<float>> expected_rows = {{0, 1}};
    int in_place = 0;
    for (int step = 1; step <= 20; ++step) {
      const float v = static_cast<float>(10 * step);
      frame.slot(state).mutable_tensor() = std::move(current);
      frame.slot(row).mutable_tensor() =
          axis == 1 ? Floats({1, 1, 2}, {v, v + 1}) : Floats({2, 1, 1}, {v, v + 1});
      const void* before = frame.slot(state).tensor().raw_data();
      ASSERT_TRUE(frame.Run().ok());
      if (frame.slot(y).tensor().raw_data() == before) ++in_place;
      expected_rows.push_back({v, v + 1});
      // Expected: rows stacked along axis 1 ([1, n, 2], row-major: the rows in order) or along
      // axis 2 ([2, n, 1]: first every row's element 0, then every row's element 1).
      std::vector<float> expected;
      if (axis == 1) {
        for (const auto& r : expected_rows) expected.insert(expected.end(), r.begin(), r.end());
      } else {
        for (int e = 0; e < 2; ++e) {
          for (const auto& r : expected_rows) expected.push_back(r[e]);
        }
      }
      ASSERT_EQ(Values(frame.slot(y).tensor()), expected) << "axis " << axis << " step " << step;
      // The Loop's back edge: the result becomes the next state.
      current = std::move(frame.slot(y).mutable_tensor());
    }
    // Every append but those that outgrew the buffer (geometric growth: a few) is in place.
    EXPECT_GE(in_place, 14) << "axis " << axis;
  }
}

}  // namespace
}  // namespace loopserve::engine
