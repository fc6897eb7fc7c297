// The hot-path contract: once a frame has run a signature, running it again creates no primitive
// and allocates no tensor; primitives are shared across frames and bounded per kernel.

#include <random>
#include <thread>

#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/dnnl/test_util.h"

namespace loopserve::engine::testing {
namespace {

struct Case {
  const char* op;
  int opset;
  std::vector<Shape> shapes;
  absl::flat_hash_map<std::string, Attribute> attributes;
};

std::vector<Case> Cases() {
  return {
      {"MatMul", 13, {Shape{3, 1, 4, 8}, Shape{2, 8, 5}}, {}},
      {"Gemm",
       13,
       {Shape{8, 4}, Shape{5, 8}, Shape{5}},
       {{"alpha", FloatAttr(0.5f)},
        {"beta", FloatAttr(2)},
        {"transA", IntAttr(1)},
        {"transB", IntAttr(1)}}},
      {"Add", 14, {Shape{4, 16}, Shape{16}}, {}},
      {"Sub", 14, {Shape{16}, Shape{4, 16}}, {}},    // swapped operands, negated
      {"Div", 14, {Shape{4, 1}, Shape{1, 16}}, {}},  // expanded src0
      {"Tanh", 13, {Shape{4, 16}}, {}},
      {"Softmax", 13, {Shape{2, 3, 4}}, {{"axis", IntAttr(1)}}},
      {"LogSoftmax", 13, {Shape{2, 3, 4}}, {{"axis", IntAttr(1)}}},
      {"Conv",
       11,
       {Shape{2, 4, 7, 6}, Shape{6, 2, 3, 3}, Shape{6}},
       {{"group", IntAttr(2)}, {"pads", IntsAttr({1, 0, 1, 2})}, {"strides", IntsAttr({2, 1})}}},
      {"MaxPool",
       12,
       {Shape{2, 3, 7, 7}},
       {{"kernel_shape", IntsAttr({3, 3})},
        {"strides", IntsAttr({2, 2})},
        {"ceil_mode", IntAttr(1)}}},
      {"AveragePool", 11, {Shape{2, 3, 7, 7}}, {{"kernel_shape", IntsAttr({2, 2})}}},
      {"GlobalAveragePool", 1, {Shape{2, 3, 4, 5}}, {}},
      {"BatchNormalization", 15, {Shape{2, 3, 4}, Shape{3}, Shape{3}, Shape{3}, Shape{3}}, {}},
      {"BatchNormalization", 15, {Shape{4, 8}, Shape{8}, Shape{8}, Shape{8}, Shape{8}}, {}},
      {"InstanceNormalization", 6, {Shape{2, 3, 4}, Shape{3}, Shape{3}}, {}},  // tiled scale
      {"LayerNormalization",
       17,
       {Shape{2, 3, 4}, Shape{1, 4}, Shape{3, 4}},
       {{"axis", IntAttr(1)}}},
      {"LRN", 13, {Shape{2, 5, 3}}, {{"size", IntAttr(3)}}},
      {"LeakyRelu", 6, {Shape{4, 16}}, {{"alpha", FloatAttr(0.2f)}}},
      {"PRelu", 16, {Shape{2, 3, 4}, Shape{3, 1}}, {}},
      // Recurrent layers: on lstm_forward / gru_forward / vanilla_rnn_forward, and (clip) on the
      // native implementation, whose scratch is kept in the frame.
      {"LSTM",
       14,
       {Shape{5, 2, 3}, Shape{1, 16, 3}, Shape{1, 16, 4}, Shape{1, 32}},
       {{"hidden_size", IntAttr(4)}}},
      {"LSTM",
       14,
       {Shape{5, 2, 3}, Shape{1, 16, 3}, Shape{1, 16, 4}, Shape{1, 32}},
       {{"hidden_size", IntAttr(4)}, {"clip", FloatAttr(0.5f)}}},
      {"GRU",
       14,
       {Shape{5, 2, 3}, Shape{1, 12, 3}, Shape{1, 12, 4}, Shape{1, 24}},
       {{"hidden_size", IntAttr(4)}, {"linear_before_reset", IntAttr(1)}}},
      {"RNN",
       14,
       {Shape{5, 2, 3}, Shape{1, 4, 3}, Shape{1, 4, 4}, Shape{1, 8}},
       {{"hidden_size", IntAttr(4)}}},
  };
}

TEST(SteadyStateTest, RepeatedRunsCreateAndAllocateNothing) {
  std::mt19937 rng(3);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.op);
    std::vector<Tensor> inputs;
    std::vector<const Tensor*> pointers;
    for (const Shape& s : c.shapes) {
      inputs.push_back(RandomTensor(DataType::kFloat32, s, rng, Range::kNonZero));
    }
    for (const Tensor& t : inputs) pointers.push_back(&t);
    absl::StatusOr<std::unique_ptr<NodeRunner>> runner =
        NodeRunner::Create(c.op, c.opset, static_cast<int>(inputs.size()), c.attributes);
    ASSERT_TRUE(runner.ok()) << runner.status();
    absl::StatusOr<const Tensor*> first = (*runner)->Run(pointers);
    ASSERT_TRUE(first.ok()) << first.status();
    Tensor expected;
    expected.CopyFrom(**first);

    const int64_t allocations = TensorAllocationCount();
    const int64_t creations = DnnlPrimitiveCreationCount();
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<const Tensor*> again = (*runner)->Run(pointers);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_TRUE(TensorsNear(**again, expected));
    }
    EXPECT_EQ(TensorAllocationCount(), allocations);
    EXPECT_EQ(DnnlPrimitiveCreationCount(), creations);

    // Another frame of the same plan finds the primitive in the kernel's cache.
    std::unique_ptr<NodeRunner> other = (*runner)->NewFrame();
    absl::StatusOr<const Tensor*> from_other = other->Run(pointers);
    ASSERT_TRUE(from_other.ok()) << from_other.status();
    EXPECT_TRUE(TensorsNear(**from_other, expected));
    EXPECT_EQ(DnnlPrimitiveCreationCount(), creations);
  }
}

TEST(SteadyStateTest, ShapeChangesReuseTheKernelCache) {
  absl::StatusOr<std::unique_ptr<NodeRunner>> runner = NodeRunner::Create("Relu", 14, 1);
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::mt19937 rng(8);
  const Tensor small = RandomTensor(DataType::kFloat32, Shape{3, 5}, rng);
  const Tensor large = RandomTensor(DataType::kFloat32, Shape{7, 5}, rng);
  ASSERT_TRUE((*runner)->Run({&small}).ok());
  const int64_t after_first = DnnlPrimitiveCreationCount();
  ASSERT_TRUE((*runner)->Run({&large}).ok());
  EXPECT_EQ(DnnlPrimitiveCreationCount(), after_first + 1);
  // Back and forth: both signatures are cached now.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<const Tensor*> y = (*runner)->Run({i % 2 ? &large : &small});
    ASSERT_TRUE(y.ok()) << y.status();
    Tensor expected;
    ASSERT_TRUE(reference::Unary(reference::UnaryOp::kRelu, i % 2 ? large : small, expected).ok());
    EXPECT_TRUE(TensorsNear(**y, expected));
  }
  EXPECT_EQ(DnnlPrimitiveCreationCount(), after_first + 1);
}

TEST(SteadyStateTest, DeclaredShapesCreateThePrimitiveAtLoad) {
  ValueType type;
  type.dtype = DataType::kFloat32;
  type.dims = std::vector<int64_t>{2, 6};
  const int64_t before = DnnlPrimitiveCreationCount();
  absl::StatusOr<std::unique_ptr<NodeRunner>> runner =
      NodeRunner::Create("Sigmoid", 13, 1, {}, {}, {type});
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ(DnnlPrimitiveCreationCount(), before + 1);
  std::mt19937 rng(2);
  const Tensor x = RandomTensor(DataType::kFloat32, Shape{2, 6}, rng);
  ASSERT_TRUE((*runner)->Run({&x}).ok());
  EXPECT_EQ(DnnlPrimitiveCreationCount(), before + 1);
}

TEST(SteadyStateTest, ManyShapesBeyondTheCacheBoundStillWork) {
  absl::StatusOr<std::unique_ptr<NodeRunner>> runner = NodeRunner::Create("Exp", 13, 1);
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::mt19937 rng(4);
  for (int n = 1; n <= static_cast<int>(DnnlKernel::kMaxCachedSignatures) + 10; ++n) {
    const Tensor x = RandomTensor(DataType::kFloat32, Shape{n}, rng);
    absl::StatusOr<const Tensor*> y = (*runner)->Run({&x});
    ASSERT_TRUE(y.ok()) << y.status();
    Tensor expected;
    ASSERT_TRUE(reference::Unary(reference::UnaryOp::kExp, x, expected).ok());
    ASSERT_TRUE(TensorsNear(**y, expected));
  }
}

TEST(SteadyStateTest, FramesOnTwoThreadsShareOneKernel) {
  // Two frames of one plan, on two threads, with different shapes: each frame keeps its own
  // bound primitive while the kernel's cache is shared.
  absl::StatusOr<std::unique_ptr<NodeRunner>> a = NodeRunner::Create("MatMul", 13, 2);
  ASSERT_TRUE(a.ok());
  std::mt19937 rng(6);
  const Tensor x1 = RandomTensor(DataType::kFloat32, Shape{4, 8}, rng);
  const Tensor w1 = RandomTensor(DataType::kFloat32, Shape{8, 3}, rng);
  const Tensor x2 = RandomTensor(DataType::kFloat32, Shape{2, 5, 6}, rng);
  const Tensor w2 = RandomTensor(DataType::kFloat32, Shape{6, 2}, rng);
  std::unique_ptr<NodeRunner> b = (*a)->NewFrame();
  Tensor e1, e2;
  ASSERT_TRUE(reference::MatMul(x1, w1, e1).ok());
  ASSERT_TRUE(reference::MatMul(x2, w2, e2).ok());
  bool ok1 = true, ok2 = true;
  auto loop = [](NodeRunner& runner, const Tensor& x, const Tensor& w, const Tensor& e, bool& ok) {
    for (int i = 0; i < 200 && ok; ++i) {
      absl::StatusOr<const Tensor*> y = runner.Run({&x, &w});
      ok = y.ok() && TensorsNear(**y, e, 1e-5, 1e-5);
    }
  };
  std::thread t1(loop, std::ref(**a), std::cref(x1), std::cref(w1), std::cref(e1), std::ref(ok1));
  std::thread t2(loop, std::ref(*b), std::cref(x2), std::cref(w2), std::cref(e2), std::ref(ok2));
  t1.join();
  t2.join();
  EXPECT_TRUE(ok1);
  EXPECT_TRUE(ok2);
}

}  // namespace
}  // namespace loopserve::engine::testing
