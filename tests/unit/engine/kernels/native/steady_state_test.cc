// The hot-path contract: once a frame has run a node with given shapes, running it again with
// the same shapes allocates nothing (no Tensor buffers, no operator new). Loop bodies rely on it.

#include <chrono>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"
#include "tests/unit/engine/kernels/native/test_util.h"
#include "tests/unit/engine/operator_new_counter.h"

namespace loopserve::engine::native_test {
namespace {

// Compiles a one-node plan and keeps a frame to run it repeatedly.
class SteadyState {
 public:
  explicit SteadyState(const OpCase& c) : context_(RunOptions()) {
    auto graph = std::make_shared<Graph>();
    Node node;
    node.name = "n";
    node.op_type = c.op;
    node.opset = c.opset;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const ValueId v = graph->AddValue(absl::StrCat("in", i));
      graph->inputs.push_back(v);
      node.inputs.push_back(v);
    }
    const ValueId out = graph->AddValue("out");
    graph->outputs.push_back(out);
    node.outputs.push_back(out);
    for (const auto& [name, attr] : c.attributes) node.attributes[name] = attr;
    graph->nodes.push_back(std::move(node));
    CompileContext compile(KernelRegistry::Builtin());
    auto plan = Plan::Compile(graph, compile);
    EXPECT_TRUE(plan.ok()) << plan.status();
    plan_ = *std::move(plan);
    frame_ = std::make_unique<ExecutionFrame>(*plan_, context_);
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      frame_->slot(graph->inputs[i]).mutable_tensor() = Tensor::ViewOf(*c.inputs[i]);
    }
  }

  absl::Status Run() { return frame_->Run(); }

 private:
  RunContext context_;
  std::shared_ptr<const Plan> plan_;
  std::unique_ptr<ExecutionFrame> frame_;
};

void ExpectNoSteadyStateAllocation(const OpCase& c) {
  SteadyState s(c);
  ASSERT_TRUE(s.Run().ok()) << c.op;
  const int64_t tensors = TensorAllocationCount();
  const int64_t news = OperatorNewCount();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(s.Run().ok());
  EXPECT_EQ(TensorAllocationCount(), tensors) << c.op << " allocates tensor buffers";
  EXPECT_EQ(OperatorNewCount(), news) << c.op << " calls operator new";
}

TEST(SteadyStateTest, NoAllocationPerRun) {
  ExpectNoSteadyStateAllocation(OpCase("Gather", 13).In(I64({1, 2, 3})).In(Scalar<int64_t>(-1)));
  ExpectNoSteadyStateAllocation(OpCase("Less", 13).In(Scalar<int64_t>(1)).In(Scalar<int64_t>(2)));
  ExpectNoSteadyStateAllocation(OpCase("Where", 16)
                                    .In(Make<bool>({2}, {true, false}))
                                    .In(I64({1, 2}))
                                    .In(Scalar<int64_t>(0)));
  ExpectNoSteadyStateAllocation(OpCase("Slice", 13)
                                    .In(Make<float>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                    .In(I64({-1}))
                                    .In(I64({std::numeric_limits<int64_t>::min()}))
                                    .In(I64({1}))
                                    .In(I64({-1})));
  ExpectNoSteadyStateAllocation(
      OpCase("Concat", 13).In(I64({1})).In(I64({2, 3})).Attr("axis", IntAttr(0)));
  ExpectNoSteadyStateAllocation(OpCase("Unsqueeze", 13).In(Scalar<int64_t>(3)).In(I64({0})));
  ExpectNoSteadyStateAllocation(OpCase("Squeeze", 13).In(I64({3})).In(I64({0})));
  ExpectNoSteadyStateAllocation(OpCase("Reshape", 14).In(I64({1, 2, 3, 4})).In(I64({2, -1})));
  ExpectNoSteadyStateAllocation(OpCase("Shape", 15).In(I64({1, 2})));
  ExpectNoSteadyStateAllocation(OpCase("Cast", 13).In(I64({1, 0})).Attr("to", IntAttr(9)));
  ExpectNoSteadyStateAllocation(
      OpCase("ReduceSum", 13).In(Make<int64_t>({2, 2}, {1, 2, 3, 4})).In(I64({1})));
  ExpectNoSteadyStateAllocation(OpCase("ArgMax", 13).In(Make<float>({2, 2}, {1, 2, 4, 3})));
  ExpectNoSteadyStateAllocation(
      OpCase("Range", 11).In(Scalar<int64_t>(0)).In(Scalar<int64_t>(5)).In(Scalar<int64_t>(1)));
  ExpectNoSteadyStateAllocation(OpCase("Transpose", 13).In(Make<float>({2, 2}, {1, 2, 3, 4})));
  ExpectNoSteadyStateAllocation(OpCase("Expand", 13).In(Scalar<int64_t>(1)).In(I64({2, 2})));
  ExpectNoSteadyStateAllocation(OpCase("Tile", 13).In(I64({1, 2})).In(I64({3})));
  ExpectNoSteadyStateAllocation(
      OpCase("Max", 13).In(I64({1, 5})).In(Scalar<int64_t>(3)).In(I64({4, 4})));
  ExpectNoSteadyStateAllocation(OpCase("Mod", 13).In(I64({7})).In(Scalar<int64_t>(3)));
  ExpectNoSteadyStateAllocation(OpCase("ConstantOfShape", 9).In(I64({2, 3})));
  ExpectNoSteadyStateAllocation(OpCase("Identity", 16).In(I64({2, 3})));
  ExpectNoSteadyStateAllocation(
      OpCase("MeanVarianceNormalization", 13).In(Make<float>({1, 2, 1, 3}, {1, 2, 3, 4, 6, 8})));
  // Einsum's products on sgemm: operands a product cannot read in place are gathered into the
  // frame's scratch, not a per-run buffer.
  for (const char* equation : {"ij,jk->ik", "ji,kj->ik", "bij,bkj->bik", "ij,jk->ki", "ij->ji"}) {
    const bool batched = equation[0] == 'b',
               unary = std::string(equation).find(',') == std::string::npos;
    OpCase c("Einsum", 12);
    c.In(batched ? Make<float>({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
                 : Make<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
    if (!unary) {
      c.In(batched              ? Make<float>({2, 4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                          1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
           : equation[0] == 'j' ? Make<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8})
                                : Make<float>({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
    }
    c.Attr("equation", StringAttr(equation));
    ExpectNoSteadyStateAllocation(c);
  }
}

// The op grid's rewritten kernels (issue 27): twiddles, taps and power buffers live in the
// kernel's state and are reused.
TEST(SteadyStateTest, NoAllocationPerRunSignalAndSampling) {
  ExpectNoSteadyStateAllocation(OpCase("DFT", 17)
                                    .In(Make<float>({1, 6, 1}, {1, 2, 3, 4, 5, 6}))
                                    .Attr("onesided", IntAttr(1)));
  ExpectNoSteadyStateAllocation(OpCase("DFT", 17).In(Make<float>({1, 3, 2}, {1, 2, 3, 4, 5, 6})));
  ExpectNoSteadyStateAllocation(OpCase("STFT", 17)
                                    .In(Make<float>({1, 8, 1}, {1, 2, 3, 4, 5, 6, 7, 8}))
                                    .In(Scalar<int64_t>(2))
                                    .In(Make<float>({4}, {0, 1, 1, 0})));
  ExpectNoSteadyStateAllocation(OpCase("GridSample", 16)
                                    .In(Make<float>({1, 1, 2, 2}, {0, 1, 2, 3}))
                                    .In(Make<float>({1, 1, 2, 2}, {0, 0, -0.5f, 0.5f})));
  ExpectNoSteadyStateAllocation(OpCase("RoiAlign", 16)
                                    .In(Make<float>({1, 1, 3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8}))
                                    .In(Make<float>({1, 4}, {0, 0, 2, 2}))
                                    .In(Make<int64_t>({1}, {0}))
                                    .Attr("output_height", IntAttr(2))
                                    .Attr("output_width", IntAttr(2)));
  ExpectNoSteadyStateAllocation(OpCase("LpPool", 18)
                                    .In(Make<float>({1, 1, 3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8}))
                                    .Attr("kernel_shape", IntsAttr({2, 2}))
                                    .Attr("p", IntAttr(3)));
  ExpectNoSteadyStateAllocation(
      OpCase("SoftmaxCrossEntropyLoss", 13).In(Make<float>({2, 2}, {1, 2, 3, 4})).In(I64({0, 1})));
  ExpectNoSteadyStateAllocation(OpCase("GatherElements", 13)
                                    .In(Make<float>({2, 2}, {1, 2, 3, 4}))
                                    .In(Make<int64_t>({2, 2}, {0, 0, 1, -1}))
                                    .Attr("axis", IntAttr(1)));
  ExpectNoSteadyStateAllocation(OpCase("Upsample", 9)
                                    .In(Make<float>({1, 1, 2, 2}, {0, 1, 2, 3}))
                                    .In(Make<float>({4}, {1, 1, 2, 2})));
}

// The 8-bit products and DynamicQuantizeLinear (issue 28): scratch and the per-call packing of a
// non-constant B reuse the frame's buffers.
TEST(SteadyStateTest, NoAllocationPerRunInt8) {
  ExpectNoSteadyStateAllocation(
      OpCase("DynamicQuantizeLinear", 11)
          .In(Make<float>({2, 9}, {1, -2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, -9})));
  ExpectNoSteadyStateAllocation(OpCase("MatMulInteger", 10)
                                    .In(Make<uint8_t>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                    .In(Make<int8_t>({3, 2}, {-1, 2, -3, 4, -5, 6}))
                                    .In(Scalar<uint8_t>(3))
                                    .In(Scalar<int8_t>(1)));
  ExpectNoSteadyStateAllocation(OpCase("QLinearMatMul", 10)
                                    .In(Make<uint8_t>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                    .In(Scalar<float>(0.5f))
                                    .In(Scalar<uint8_t>(3))
                                    .In(Make<int8_t>({3, 2}, {-1, 2, -3, 4, -5, 6}))
                                    .In(Scalar<float>(0.25f))
                                    .In(Scalar<int8_t>(0))
                                    .In(Scalar<float>(0.1f))
                                    .In(Scalar<uint8_t>(128)));
}

// Reports (does not assert: the machine is shared) the cost of int64 scalar ops.
TEST(SteadyStateTest, ScalarOpLatency) {
  for (const char* op : {"Identity", "Less", "Equal", "Mod", "Max", "Gather"}) {
    OpCase c(op, 13);
    c.In(Scalar<int64_t>(7));
    if (std::string(op) == "Gather") {
      c.inputs[0] = I64({1, 2, 3});
      c.In(Scalar<int64_t>(1));
    } else if (std::string(op) != "Identity") {
      c.In(Scalar<int64_t>(3));
    }
    SteadyState s(c);
    ASSERT_TRUE(s.Run().ok());
    constexpr int kRuns = 200000;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRuns; ++i) (void)s.Run();
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
        kRuns;
    std::printf("%s int64 scalar: %.1f ns per frame run\n", op, ns);
  }
}

}  // namespace
}  // namespace loopserve::engine::native_test
