// The packed rows-times-constant product (engine/kernels/native/packed_gemm), on its AVX2 tiles and
// on its AVX-512 tiles (each test runs for both, the ISA capped to each), against a
// double-precision product computed here, on odd shapes (1, 3, 7, 17 rows; 8, 9, 16 rows: whole
// and split 8-row tiles; n not a multiple of the 24- or 48-column panel or of the vector; k = 1;
// k past the AVX-512 depth block of 128), with and without a bias, transposed weights and alpha;
// a split by column panels against the whole; and the MatMul and Gemm kernels choosing it (no
// oneDNN primitive) for more than one row, their outputs against reference::MatMul and a
// double-precision Gemm; on AVX-512, products of more than kMaxRowsAvx512 rows keep oneDNN.

#include "engine/kernels/native/packed_gemm.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/native/packed_test_util.h"

namespace loopserve::engine::native {
namespace {

using test_util::Activate;
using test_util::MakeNode;
using test_util::Random;

// The ISA capped to the parameter: AVX2 (the AVX2-only CPU's path, 24-column panels) or AVX-512
// (48-column panels, 8-row tiles); skipped where the CPU lacks it.
class PackedGemmTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(DetectedIsa()) < static_cast<int>(GetParam())) {
      GTEST_SKIP() << "the CPU lacks " << IsaName(GetParam());
    }
    SetMaxIsa(GetParam());
  }
  void TearDown() override { SetMaxIsa(Isa::kAvx512); }
};

INSTANTIATE_TEST_SUITE_P(Isas, PackedGemmTest, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

// The epilogues a fused MatMul hands the kernel: none, a bias row, an addend matrix (an RNN
// cell's other product) with a bias and tanh, a bias then an addend (a residual MLP's second
// product), an addend with relu, a bias with sigmoid.
struct Variant {
  bool bias = false;
  bool addend = false;
  PackedGemv::Activation activation = PackedGemv::Activation::kNone;
  bool bias_first = false;
};
const Variant kVariants[] = {{false, false, PackedGemv::Activation::kNone, false},
                             {true, false, PackedGemv::Activation::kNone, false},
                             {true, true, PackedGemv::Activation::kTanh, false},
                             {true, true, PackedGemv::Activation::kNone, true},
                             {false, true, PackedGemv::Activation::kRelu, false},
                             {true, false, PackedGemv::Activation::kSigmoid, false}};

TEST_P(PackedGemmTest, MatchesDoublePrecisionProduct) {
  if (!PackedGemm::Available()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(5);
  const std::vector<std::pair<int64_t, int64_t>> kn = {
      {1, 1}, {1, 17}, {3, 16}, {7, 5}, {64, 33}, {100, 48}, {129, 200}, {512, 40}, {300, 100}};
  for (const int64_t m : {1, 2, 3, 5, 6, 7, 8, 9, 13, 16, 17, 64}) {
    for (const auto& [k, n] : kn) {
      for (const bool transposed : {false, true}) {
        for (const Variant& variant : kVariants) {
          SCOPED_TRACE(::testing::Message()
                       << m << "x" << k << "x" << n << " transposed=" << transposed
                       << " bias=" << variant.bias << " addend=" << variant.addend
                       << " activation=" << static_cast<int>(variant.activation));
          const float alpha = transposed ? 0.5f : 1.0f;
          const Tensor w = Random(transposed ? Shape{n, k} : Shape{k, n}, rng, 0.3f);
          const Tensor x = Random(Shape{m, k}, rng);
          const Tensor bias = Random(Shape{n}, rng);
          const Tensor addend = Random(Shape{m, n}, rng);
          const PackedGemm gemm(w.data<float>(), k, n, transposed, alpha);
          PackedGemm::Epilogue epilogue;
          if (variant.bias) epilogue.bias = bias.data<float>();
          if (variant.addend) epilogue.addend = addend.data<float>();
          epilogue.activation = variant.activation;
          epilogue.bias_first = variant.bias_first;
          const double bias_scale = variant.activation == PackedGemv::Activation::kNone ? 2.0 : 1.0;
          epilogue.bias_scale = static_cast<float>(bias_scale);
          // One float past the end of y: the tail stores must stay inside [m, n].
          std::vector<float> y(m * n + 1, 12345.0f);
          gemm.Run(x.data<float>(), m, epilogue, y.data());
          EXPECT_EQ(y[m * n], 12345.0f);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0;
              for (int64_t p = 0; p < k; ++p) {
                const float wv =
                    transposed ? w.data<float>()[j * k + p] : w.data<float>()[p * n + j];
                sum += static_cast<double>(x.data<float>()[i * k + p]) * wv;
              }
              sum *= alpha;
              if (variant.bias) sum += bias_scale * bias.data<float>()[j];
              if (variant.addend) sum += addend.data<float>()[i * n + j];  // either order
              ASSERT_NEAR(y[i * n + j], Activate(sum, variant.activation),
                          1e-5 + 1e-5 * std::sqrt(static_cast<double>(k)))
                  << "row " << i << " column " << j;
            }
          }
        }
      }
    }
  }
}

// The addend may be the output itself (a fused Add whose operand is the product's own buffer).
TEST_P(PackedGemmTest, AddendMayBeTheOutput) {
  if (!PackedGemm::Available()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(6);
  // 17 rows and 200 deep: more than one row tile and more than one depth block on AVX-512.
  const int64_t m = 17, k = 200, n = 30;
  const Tensor w = Random(Shape{k, n}, rng);
  const Tensor x = Random(Shape{m, k}, rng);
  const Tensor start = Random(Shape{m, n}, rng);
  const PackedGemm gemm(w.data<float>(), k, n, /*transposed=*/false);
  std::vector<float> y(start.data<float>(), start.data<float>() + m * n);
  PackedGemm::Epilogue epilogue;
  epilogue.addend = y.data();
  gemm.Run(x.data<float>(), m, epilogue, y.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = start.data<float>()[i * n + j];
      for (int64_t p = 0; p < k; ++p) {
        sum += static_cast<double>(x.data<float>()[i * k + p]) * w.data<float>()[p * n + j];
      }
      ASSERT_NEAR(y[i * n + j], sum, 1e-5 * std::sqrt(static_cast<double>(k))) << i << "," << j;
    }
  }
}

// Panels [first, last) write exactly their columns, and the parts together equal the whole.
TEST_P(PackedGemmTest, PanelRangesCoverTheProduct) {
  if (!PackedGemm::Available()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(9);
  const int64_t m = 11, k = 133;
  const int64_t panel =
      GetParam() == Isa::kAvx512 ? PackedGemm::kPanelAvx512 : PackedGemm::kPanelAvx2;
  const int64_t n = 2 * panel + 13;  // 3 panels, the last 13 columns wide
  const Tensor w = Random(Shape{k, n}, rng);
  const Tensor x = Random(Shape{m, k}, rng);
  const Tensor bias = Random(Shape{n}, rng);
  const PackedGemm gemm(w.data<float>(), k, n, /*transposed=*/false);
  ASSERT_EQ(gemm.panel(), panel);
  ASSERT_EQ(gemm.panels(), 3);
  PackedGemm::Epilogue epilogue;
  epilogue.bias = bias.data<float>();
  epilogue.activation = PackedGemv::Activation::kTanh;
  std::vector<float> whole(m * n), parts(m * n, -7.0f);
  gemm.Run(x.data<float>(), m, epilogue, whole.data());
  gemm.RunPanels(x.data<float>(), m, epilogue, parts.data(), 1, 2);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (j >= panel && j < 2 * panel) {
        EXPECT_EQ(parts[i * n + j], whole[i * n + j]) << i << "," << j;
      } else {
        EXPECT_EQ(parts[i * n + j], -7.0f) << i << "," << j;
      }
    }
  }
  gemm.RunPanels(x.data<float>(), m, epilogue, parts.data(), 0, 1);
  gemm.RunPanels(x.data<float>(), m, epilogue, parts.data(), 2, 3);
  EXPECT_EQ(parts, whole);
}

ValueType FloatType(int rank) {
  ValueType t;
  t.dtype = DataType::kFloat32;
  t.dims = std::vector<int64_t>(rank, -1);
  return t;
}

Tensor RunModel(const Model& model, const Tensor& in) {
  std::vector<Value> feed;
  feed.push_back(Value(Tensor::ViewOf(in)));
  auto out = model.Run(std::move(feed), RunOptions());
  EXPECT_TRUE(out.ok()) << out.status();
  Tensor copy;
  if (out.ok()) copy.CopyFrom((*out)[0].tensor());
  return copy;
}

// y = Tanh(MatMul(a, W) + h + bias) (an RNN cell: h the other product, an input of the output's
// shape), a of rank 2 or 3 (batch folded into the rows): the fused MatMul runs on the packed
// kernel with the addend, the bias and the tanh applied in its register tiles, creating no
// primitive, and agrees with reference::MatMul + h + bias and std::tanh.
TEST_P(PackedGemmTest, MatMulUsesItForRows) {
  if (!PackedGemm::Available()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(3);
  const int64_t k = 40, n = 50;
  const Tensor w = Random(Shape{k, n}, rng, 0.3f);
  const Tensor bias = Random(Shape{n}, rng);
  for (const Shape& a_shape : {Shape{3, k}, Shape{7, k}, Shape{17, k}, Shape{2, 3, k}}) {
    SCOPED_TRACE(a_shape.ToString());
    Shape::Dims out_dims(a_shape.dims().begin(), a_shape.dims().end());
    out_dims.back() = n;
    const Shape out_shape(out_dims);
    auto g = std::make_shared<Graph>();
    const ValueId a = g->AddValue("a", FloatType(a_shape.rank()));
    const ValueId h = g->AddValue("h", FloatType(a_shape.rank()));
    const ValueId wid = g->AddValue("w");
    const ValueId bid = g->AddValue("bias");
    const ValueId product = g->AddValue("product");
    const ValueId with_h = g->AddValue("with_h");
    const ValueId sum = g->AddValue("sum");
    const ValueId y = g->AddValue("y");
    g->constants.emplace_back(wid, std::make_shared<Tensor>(Tensor::ViewOf(w)));
    g->constants.emplace_back(bid, std::make_shared<Tensor>(Tensor::ViewOf(bias)));
    g->nodes.push_back(MakeNode("MatMul", {a, wid}, product));
    g->nodes.push_back(MakeNode("Add", {product, h}, with_h));
    g->nodes.push_back(MakeNode("Add", {with_h, bid}, sum));
    g->nodes.push_back(MakeNode("Tanh", {sum}, y));
    g->inputs = {a, h};
    g->outputs = {y};
    auto model = Model::FromGraph(g);
    ASSERT_TRUE(model.ok()) << model.status();
    const Tensor in = Random(a_shape, rng);
    const Tensor addend = Random(out_shape, rng);
    const int64_t before = DnnlPrimitiveCreationCount();
    std::vector<Value> feed;
    feed.push_back(Value(Tensor::ViewOf(in)));
    feed.push_back(Value(Tensor::ViewOf(addend)));
    auto out = (*model)->Run(std::move(feed), RunOptions());
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& got = (*out)[0].tensor();
    EXPECT_EQ(DnnlPrimitiveCreationCount(), before);

    Tensor want;
    ASSERT_TRUE(reference::MatMul(in, w, want).ok());
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.NumElements(); ++i) {
      const double expected = std::tanh(static_cast<double>(want.data<float>()[i]) +
                                        addend.data<float>()[i] + bias.data<float>()[i % n]);
      ASSERT_NEAR(got.data<float>()[i], expected, 1e-5) << i;
    }
  }
}

// On AVX-512 a product of more rows than kMaxRowsAvx512 keeps oneDNN's brgemm (a primitive is
// created), one of that many rows does not; both agree with reference::MatMul.
TEST_P(PackedGemmTest, Avx512KeepsOneDnnForManyRows) {
  if (GetParam() != Isa::kAvx512) GTEST_SKIP() << "the row limit is AVX-512's";
  std::mt19937 rng(8);
  const int64_t k = 32, n = 64;
  const Tensor w = Random(Shape{k, n}, rng, 0.3f);
  for (const int64_t rows : {PackedGemm::kMaxRowsAvx512, PackedGemm::kMaxRowsAvx512 + 1}) {
    SCOPED_TRACE(rows);
    auto g = std::make_shared<Graph>();
    const ValueId a = g->AddValue("a", FloatType(2));
    const ValueId wid = g->AddValue("w");
    const ValueId y = g->AddValue("y");
    g->constants.emplace_back(wid, std::make_shared<Tensor>(Tensor::ViewOf(w)));
    g->nodes.push_back(MakeNode("MatMul", {a, wid}, y));
    g->inputs = {a};
    g->outputs = {y};
    auto model = Model::FromGraph(g);
    ASSERT_TRUE(model.ok()) << model.status();
    const Tensor in = Random(Shape{rows, k}, rng);
    const int64_t before = DnnlPrimitiveCreationCount();
    const Tensor got = RunModel(**model, in);
    if (rows > PackedGemm::kMaxRowsAvx512) {
      EXPECT_GT(DnnlPrimitiveCreationCount(), before);
    } else {
      EXPECT_EQ(DnnlPrimitiveCreationCount(), before);
    }
    Tensor want;
    ASSERT_TRUE(reference::MatMul(in, w, want).ok());
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.NumElements(); ++i) {
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4) << i;
    }
  }
}

// GRU-style Gemm(x, W^T, b) with alpha and beta: on the packed kernel (alpha and the transpose
// folded into the packing, beta * b as its bias), against a double-precision Gemm; a C of full rows
// is left to oneDNN (a primitive is created) and still agrees.
TEST_P(PackedGemmTest, GemmUsesItWithTransposedWeightsAlphaAndBias) {
  if (!PackedGemm::Available()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(4);
  const int64_t m = 5, k = 24, n = 36;
  const Tensor w = Random(Shape{n, k}, rng, 0.3f);  // transB = 1
  for (const bool full_c : {false, true}) {
    SCOPED_TRACE(full_c ? "C [m, n]" : "C [n]");
    const Tensor c = Random(full_c ? Shape{m, n} : Shape{n}, rng);
    auto g = std::make_shared<Graph>();
    const ValueId a = g->AddValue("a", FloatType(2));
    const ValueId wid = g->AddValue("w");
    const ValueId cid = g->AddValue("c");
    const ValueId y = g->AddValue("y");
    g->constants.emplace_back(wid, std::make_shared<Tensor>(Tensor::ViewOf(w)));
    g->constants.emplace_back(cid, std::make_shared<Tensor>(Tensor::ViewOf(c)));
    Node gemm = MakeNode("Gemm", {a, wid, cid}, y);
    gemm.attributes["transB"].i = 1;
    gemm.attributes["alpha"].type = Attribute::Type::kFloat;
    gemm.attributes["alpha"].f = 0.75f;
    const float beta = full_c ? 1.0f : 2.0f;
    gemm.attributes["beta"].type = Attribute::Type::kFloat;
    gemm.attributes["beta"].f = beta;
    g->nodes.push_back(std::move(gemm));
    g->inputs = {a};
    g->outputs = {y};
    auto model = Model::FromGraph(g);
    ASSERT_TRUE(model.ok()) << model.status();
    const Tensor in = Random(Shape{m, k}, rng);
    const int64_t before = DnnlPrimitiveCreationCount();
    const Tensor got = RunModel(**model, in);
    if (full_c) {
      EXPECT_GT(DnnlPrimitiveCreationCount(), before);
    } else {
      EXPECT_EQ(DnnlPrimitiveCreationCount(), before);
    }
    ASSERT_EQ(got.shape(), (Shape{m, n}));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          sum += static_cast<double>(in.data<float>()[i * k + p]) * w.data<float>()[j * k + p];
        }
        const double expected = 0.75 * sum + beta * c.data<float>()[full_c ? i * n + j : j];
        ASSERT_NEAR(got.data<float>()[i * n + j], expected, 1e-5) << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace loopserve::engine::native
