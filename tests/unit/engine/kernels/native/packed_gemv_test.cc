// The packed one-row float matmul (engine/kernels/native/packed_gemv) against a double-precision
// product computed here, on shapes that exercise every panel and lane tail, with each fused
// activation; its tanh against std::tanh; and the MatMul kernels choosing it (no oneDNN primitive)
// only for one-row products with constant weights.

#include "engine/kernels/native/packed_gemv.h"

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/packed_gemm.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/native/packed_test_util.h"

namespace loopserve::engine::native {
namespace {

using test_util::Activate;
using test_util::MakeNode;
using test_util::Random;

// Run on the CPU's widest kernel, and again forced onto the AVX2 one (the same on an AVX2 CPU).
class PackedGemvIsaTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { SetMaxIsa(GetParam() ? Isa::kAvx2 : Isa::kAvx512); }
  void TearDown() override { SetMaxIsa(Isa::kAvx512); }
};

TEST_P(PackedGemvIsaTest, MatchesDoublePrecisionProduct) {
  if (!PackedGemv::Available()) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU";
  std::mt19937 rng(11);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {3, 17}, {2, 16}, {5, 127}, {9, 128}, {4, 129}, {255, 129}, {256, 256}, {7, 1000}};
  for (const auto& [k, n] : shapes) {
    for (const auto activation :
         {PackedGemv::Activation::kNone, PackedGemv::Activation::kTanh,
          PackedGemv::Activation::kRelu, PackedGemv::Activation::kSigmoid}) {
      for (const bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "k=" << k << " n=" << n << " activation="
                                          << static_cast<int>(activation) << " bias=" << with_bias);
        const Tensor w = Random(Shape{k, n}, rng, 0.3f);
        const Tensor x = Random(Shape{k}, rng);
        const Tensor bias = Random(Shape{n}, rng);
        const PackedGemv gemv(w, activation);
        // One float past the end of y: the tail stores must stay inside n.
        std::vector<float> y(n + 1, 12345.0f);
        gemv.Run(x.data<float>(), with_bias ? bias.data<float>() : nullptr, y.data());
        EXPECT_EQ(y[n], 12345.0f);
        for (int64_t j = 0; j < n; ++j) {
          double sum = with_bias ? bias.data<float>()[j] : 0.0;
          for (int64_t i = 0; i < k; ++i) {
            sum += static_cast<double>(x.data<float>()[i]) * w.data<float>()[i * n + j];
          }
          ASSERT_NEAR(y[j], Activate(sum, activation), 1e-5 + 1e-5 * std::fabs(sum))
              << "column " << j;
        }
      }
    }
  }
}

// Successive calls alternate the order of the column panels (the weights last read stay in cache
// for the next call); every column's sum keeps its order, so the results are bitwise the same.
TEST_P(PackedGemvIsaTest, SuccessiveCallsAgreeBitwise) {
  if (!PackedGemv::Available()) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU";
  std::mt19937 rng(12);
  const Tensor w = Random(Shape{256, 1000}, rng, 0.3f);
  const Tensor x = Random(Shape{256}, rng);
  const PackedGemv gemv(w, PackedGemv::Activation::kNone);
  std::vector<float> first(1000), again(1000);
  gemv.Run(x.data<float>(), nullptr, first.data());
  for (int call = 0; call < 3; ++call) {
    gemv.Run(x.data<float>(), nullptr, again.data());
    for (int64_t j = 0; j < 1000; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < 256; ++i) {
        sum += static_cast<double>(x.data<float>()[i]) * w.data<float>()[i * 1000 + j];
      }
      ASSERT_NEAR(again[j], sum, 1e-5 + 1e-5 * std::fabs(sum))
          << "call " << call << " column " << j;
      ASSERT_EQ(again[j], first[j]) << "call " << call << " column " << j;
    }
  }
}

// The fused tanh is ONNX Runtime's (MLAS) rational approximation: within a few float ulp of the
// exact value everywhere, at most 1 in magnitude, and odd.
TEST_P(PackedGemvIsaTest, TanhIsAccurate) {
  if (!PackedGemv::Available()) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU";
  // y = tanh(x * 1 + 0) through a 1x1 identity weight, for x in [-12, 12].
  Tensor one(DataType::kFloat32, Shape{1, 1});
  one.mutable_data<float>()[0] = 1.0f;
  const PackedGemv gemv(one, PackedGemv::Activation::kTanh);
  double worst = 0;
  for (int i = -120000; i <= 120000; ++i) {
    const float x = static_cast<float>(i) * 1e-4f;
    float y = 0;
    gemv.Run(&x, nullptr, &y);
    const double exact = std::tanh(static_cast<double>(x));
    worst = std::max(worst, std::fabs(y - exact));
    ASSERT_LE(std::fabs(y), 1.0f) << x;
    float minus_y = 0;
    const float minus_x = -x;
    gemv.Run(&minus_x, nullptr, &minus_y);
    ASSERT_EQ(minus_y, -y) << x;
  }
  EXPECT_LT(worst, 5e-7);  // |tanh| < 1: a few ulp of 2^-24 (6e-8) near 1
}

INSTANTIATE_TEST_SUITE_P(Kernels, PackedGemvIsaTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Avx2" : "Widest"; });

ValueType FloatType(int rank) {
  ValueType t;
  t.dtype = DataType::kFloat32;
  t.dims = std::vector<int64_t>(rank, -1);
  return t;
}

// y = Tanh(MatMul(a, W) + bias) with constant W and bias, compiled (and fused) by Model::FromGraph.
std::shared_ptr<const Model> RnnCell(const Tensor& w, const Tensor& bias) {
  auto g = std::make_shared<Graph>();
  const ValueId a = g->AddValue("a", FloatType(2));
  const ValueId wid = g->AddValue("w");
  const ValueId bid = g->AddValue("bias");
  const ValueId product = g->AddValue("product");
  const ValueId sum = g->AddValue("sum");
  const ValueId y = g->AddValue("y");
  g->constants.emplace_back(wid, std::make_shared<Tensor>(Tensor::ViewOf(w)));
  g->constants.emplace_back(bid, std::make_shared<Tensor>(Tensor::ViewOf(bias)));
  g->nodes.push_back(MakeNode("MatMul", {a, wid}, product));
  g->nodes.push_back(MakeNode("Add", {product, bid}, sum));
  g->nodes.push_back(MakeNode("Tanh", {sum}, y));
  g->inputs = {a};
  g->outputs = {y};
  auto model = Model::FromGraph(g);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// One row takes the packed kernel (no primitive is created for it); more rows, or the kernel
// turned off, take the oneDNN matmul; all give the same values.
TEST(PackedGemvTest, MatMulUsesItForOneRowOnly) {
  if (!PackedGemv::Available()) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU";
  std::mt19937 rng(3);
  const Tensor w = Random(Shape{64, 96}, rng, 0.3f);
  const Tensor bias = Random(Shape{96}, rng);
  std::shared_ptr<const Model> model = RnnCell(w, bias);
  ASSERT_NE(model, nullptr);
  auto run = [&](const Tensor& in) {
    std::vector<Value> feed;
    feed.push_back(Value(Tensor::ViewOf(in)));
    auto out = model->Run(std::move(feed), RunOptions());
    EXPECT_TRUE(out.ok()) << out.status();
    Tensor copy;
    if (out.ok()) copy.CopyFrom((*out)[0].tensor());
    return copy;
  };
  const Tensor row = Random(Shape{1, 64}, rng);
  const int64_t before = DnnlPrimitiveCreationCount();
  const Tensor packed = run(row);
  EXPECT_EQ(DnnlPrimitiveCreationCount(), before);
  // (Below AVX-512 more rows take the packed rows kernel, packed_gemm_test.cc: off here.)
  PackedGemm::SetEnabled(false);
  const Tensor rows = Random(Shape{3, 64}, rng);
  run(rows);
  PackedGemm::SetEnabled(true);
  EXPECT_GT(DnnlPrimitiveCreationCount(), before);

  // Off for the load and the run (kernels prepare a signature when it first runs): the one-row
  // product then runs on the native batched matrix-vector kernel (no primitive either), an
  // independent implementation to compare with.
  PackedGemv::SetEnabled(false);
  std::shared_ptr<const Model> unpacked = RnnCell(w, bias);
  ASSERT_NE(unpacked, nullptr);
  std::vector<Value> feed;
  feed.push_back(Value(Tensor::ViewOf(row)));
  auto want = unpacked->Run(std::move(feed), RunOptions());
  PackedGemv::SetEnabled(true);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(packed.shape(), (*want)[0].tensor().shape());
  for (int64_t j = 0; j < packed.NumElements(); ++j) {
    EXPECT_NEAR(packed.data<float>()[j], (*want)[0].tensor().data<float>()[j], 1e-5) << j;
  }
}

}  // namespace
}  // namespace loopserve::engine::native
