// Opt-in bf16 (LoadOptions::precision = kBf16; engine/kernels/native/bf16_matmul.h): a MatMul with
// constant weights and a fused Add + Tanh epilogue runs as kBf16MatMulOp, within the documented
// bound of the product computed here in double precision (|y - y_exact| <= 2^-7 sum |a| |b|,
// Tanh being 1-Lipschitz), and really in reduced precision from kMinBf16Rows rows on (it differs
// from float32 by more than float32 rounding; float32 where oneDNN has no bf16 matmul, as under
// ONEDNN_MAX_CPU_ISA=AVX2), in float32 below; fp32 stays the default; a CPU without native bf16
// refuses it unless forced.

#include "engine/kernels/native/bf16_matmul.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/ir/graph.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/native/packed_test_util.h"

namespace loopserve::engine::native {
namespace {

using test_util::MakeNode;

struct Case {
  std::shared_ptr<Graph> graph;
  Tensor w, bias;
};

Tensor Random(const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(DataType::kFloat32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

// y = Tanh(x @ W + bias), W [k, n] and bias [n] constants.
Case MakeCase(int64_t k, int64_t n, std::mt19937& rng) {
  Case c;
  c.w = Random(Shape{k, n}, rng);
  c.bias = Random(Shape{n}, rng);
  c.graph = std::make_shared<Graph>();
  Graph& g = *c.graph;
  const ValueId x = g.AddValue("x"), w = g.AddValue("w"), b = g.AddValue("b"), p = g.AddValue("p"),
                s = g.AddValue("s"), y = g.AddValue("y");
  g.constants.emplace_back(w, std::make_shared<Tensor>(Tensor::ViewOf(c.w)));
  g.constants.emplace_back(b, std::make_shared<Tensor>(Tensor::ViewOf(c.bias)));
  g.nodes.push_back(MakeNode("MatMul", {x, w}, p));
  g.nodes.push_back(MakeNode("Add", {p, b}, s));
  g.nodes.push_back(MakeNode("Tanh", {s}, y));
  g.inputs = {x};
  g.outputs = {y};
  return c;
}

Tensor RunOnce(const Model& model, const Tensor& x) {
  std::vector<Value> feed;
  feed.push_back(Value(Tensor::ViewOf(x)));
  RunStats stats;
  auto out = model.Run(std::move(feed), RunOptions(), &stats);
  EXPECT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(stats.reference_steps, 0);
  Tensor result;
  if (out.ok()) result.CopyFrom((*out)[0].tensor());
  return result;
}

TEST(Bf16MatMulTest, WithinTheBoundAndReducedFromFourRows) {
  std::mt19937 rng(31);
  const int64_t k = 200, n = 48;
  const Case c = MakeCase(k, n, rng);
  LoadOptions bf16;
  bf16.precision = LoadOptions::Precision::kBf16;
  bf16.force_precision = true;  // emulated where the CPU lacks bf16: the same numbers
  bf16.dump_plan = true;
  auto model = Model::FromGraph(std::make_shared<Graph>(*c.graph), bf16);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE((*model)->plan_dump().find("bf16_products: _FusedMatMul"), std::string::npos)
      << (*model)->plan_dump();
  auto fp32 = Model::FromGraph(std::make_shared<Graph>(*c.graph), LoadOptions());
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ((*fp32)->plan_dump().find("_MatMulBf16"), std::string::npos);

  for (const int64_t m : {1, 3, 4, 16, 37}) {
    SCOPED_TRACE(::testing::Message() << m << " rows");
    const Tensor x = Random(Shape{m, k}, rng);
    const Tensor got = RunOnce(**model, x);
    const Tensor want32 = RunOnce(**fp32, x);
    ASSERT_EQ(got.shape(), (Shape{m, n}));
    double largest_fp32_gap = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = c.bias.data<float>()[j], magnitude = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double a = x.data<float>()[i * k + p], b = c.w.data<float>()[p * n + j];
          exact += a * b;
          magnitude += std::abs(a * b);
        }
        const double y = got.data<float>()[i * n + j];
        ASSERT_LE(std::abs(y - std::tanh(exact)), std::ldexp(magnitude, -7) + 1e-5)
            << i << ", " << j;
        largest_fp32_gap =
            std::max(largest_fp32_gap, std::abs(y - want32.data<float>()[i * n + j]));
      }
    }
    if (m >= kMinBf16Rows && Bf16MatMulAvailable()) {
      EXPECT_GT(largest_fp32_gap, 1e-4) << "the product did not run in bf16";
    } else {
      EXPECT_LT(largest_fp32_gap, 1e-5) << "a product below kMinBf16Rows rows is float32";
    }
  }
}

// A product met at ever new row counts (a LoopStepper's batch, a growing sequence) keeps at most
// DnnlKernel::kMaxCachedSignatures primitives and packs B once per layout: row counts past the
// cap are prepared again when they recur, cached ones are not, and every result stays within the
// bound.
TEST(Bf16MatMulTest, ManyRowCountsStayBoundedAndCorrect) {
  std::mt19937 rng(33);
  const int64_t k = 24, n = 16;
  const Case c = MakeCase(k, n, rng);
  LoadOptions bf16;
  bf16.precision = LoadOptions::Precision::kBf16;
  bf16.force_precision = true;
  auto model = Model::FromGraph(std::make_shared<Graph>(*c.graph), bf16);
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t cap = static_cast<int64_t>(DnnlKernel::kMaxCachedSignatures);
  auto check = [&](int64_t m) {
    SCOPED_TRACE(::testing::Message() << m << " rows");
    const Tensor x = Random(Shape{m, k}, rng);
    const Tensor got = RunOnce(**model, x);
    ASSERT_EQ(got.shape(), (Shape{m, n}));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = c.bias.data<float>()[j], magnitude = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double a = x.data<float>()[i * k + p], b = c.w.data<float>()[p * n + j];
          exact += a * b;
          magnitude += std::abs(a * b);
        }
        ASSERT_LE(std::abs(got.data<float>()[i * n + j] - std::tanh(exact)),
                  std::ldexp(magnitude, -7) + 1e-5)
            << i << ", " << j;
      }
    }
  };
  for (int64_t m = 1; m <= cap + 8; ++m) check(m);
  int64_t before = DnnlPrimitiveCreationCount();
  check(2);  // cached: no new primitive
  check(3);
  EXPECT_EQ(DnnlPrimitiveCreationCount() - before, 0);
  before = DnnlPrimitiveCreationCount();
  check(cap + 8);  // past the cap: prepared again each time it recurs
  check(cap + 7);
  EXPECT_GT(DnnlPrimitiveCreationCount() - before, 0);
}

TEST(Bf16MatMulTest, RefusedWithoutNativeBf16UnlessForced) {
  std::mt19937 rng(32);
  const Case c = MakeCase(8, 8, rng);
  LoadOptions bf16;
  bf16.precision = LoadOptions::Precision::kBf16;
  auto model = Model::FromGraph(std::make_shared<Graph>(*c.graph), bf16);
  if (CpuHasNativeBf16()) {
    EXPECT_TRUE(model.ok()) << model.status();
  } else {
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(std::string(model.status().message()).find("bf16"), std::string::npos);
    bf16.force_precision = true;
    EXPECT_TRUE(Model::FromGraph(std::make_shared<Graph>(*c.graph), bf16).ok());
  }
}

}  // namespace
}  // namespace loopserve::engine::native
