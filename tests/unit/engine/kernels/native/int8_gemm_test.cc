// The 8-bit integer product (engine/kernels/native/int8_gemm) on each of its paths (AVX-512 VNNI
// where the CPU has it, AVX2 and scalar through SetMaxIsa) against the ONNX definition computed
// here in int64, for every signedness of A and B and every zero-point form (none, per tensor, per
// row of A, per column of B), on odd shapes (one row, k and n not multiples of the 4-deep groups,
// the 16/8-column vectors or the 64/24-column panels) and on extreme values (the sums vpmaddubsw
// would saturate); the MatMulInteger and QLinearMatMul kernels with a constant (packed at load)
// and a non-constant, batched B; DynamicQuantizeLinear against the ONNX formula in float32.

#include "engine/kernels/native/int8_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/base/status_macros.h"
#include "engine/engine.h"
#include "engine/ir/fusion.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/int8_gemm_dnnl.h"
#include "engine/transform/fuse_int_matmul.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/native/packed_test_util.h"

namespace loopserve::engine::native {
namespace {

using test_util::MakeNode;

// Values of an 8-bit type: uniform over its range, or only its two extremes.
Tensor RandomBytes(const Shape& shape, bool is_signed, bool extremes, std::mt19937& rng) {
  Tensor t(is_signed ? DataType::kInt8 : DataType::kUint8, shape);
  const int lo = is_signed ? -128 : 0;
  const int hi = is_signed ? 127 : 255;
  std::uniform_int_distribution<int> dist(lo, hi);
  std::bernoulli_distribution coin(0.5);
  uint8_t* p = static_cast<uint8_t*>(t.mutable_raw_data());
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    const int v = extremes ? (coin(rng) ? lo : hi) : dist(rng);
    p[i] = static_cast<uint8_t>(v);
  }
  return t;
}

int64_t ValueAt(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
}

// The ONNX definition: y[i, j] = sum_p (a[i, p] - azp[i]) * (b[p, j] - bzp[j]), in int64.
std::vector<int64_t> Reference(const Tensor& a, const Tensor& b, const Tensor* azp,
                               const Tensor* bzp, int64_t m, int64_t k, int64_t n) {
  std::vector<int64_t> y(m * n);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t za = azp == nullptr ? 0 : ValueAt(*azp, azp->NumElements() == 1 ? 0 : i);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t zb = bzp == nullptr ? 0 : ValueAt(*bzp, bzp->NumElements() == 1 ? 0 : j);
      int64_t sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += (ValueAt(a, i * k + p) - za) * (ValueAt(b, p * n + j) - zb);
      y[i * n + j] = sum;
    }
  }
  return y;
}

// Each test runs on every path the CPU has; the cap is lifted afterwards.
class Int8GemmTest : public ::testing::Test {
 protected:
  void TearDown() override { SetMaxIsa(Isa::kAvx512); }

  // The caps to run under, each with the path it must give.
  static std::vector<std::pair<Isa, Int8Gemm::Path>> Paths() {
    std::vector<std::pair<Isa, Int8Gemm::Path>> paths = {{Isa::kScalar, Int8Gemm::Path::kScalar}};
    if (DetectedIsa() >= Isa::kAvx2) paths.push_back({Isa::kAvx2, Int8Gemm::Path::kAvx2});
    SetMaxIsa(Isa::kAvx512);
    if (Int8Gemm::BestPath() == Int8Gemm::Path::kAvx512Vnni) {
      paths.push_back({Isa::kAvx512, Int8Gemm::Path::kAvx512Vnni});
    }
    return paths;
  }
};

enum class ZeroForm { kNone, kPerTensor, kPerRowAndColumn };

TEST_F(Int8GemmTest, MatchesReferenceForEverySignednessZeroPointAndPath) {
  std::mt19937 rng(28);
  const std::vector<std::pair<int64_t, int64_t>> kn = {{1, 1},   {3, 17},    {17, 15},  {64, 64},
                                                       {67, 65}, {130, 200}, {256, 33}, {5, 129}};
  for (const auto& [isa, path] : Paths()) {
    SetMaxIsa(isa);
    for (const bool a_signed : {false, true}) {
      for (const bool b_signed : {false, true}) {
        for (const ZeroForm form :
             {ZeroForm::kNone, ZeroForm::kPerTensor, ZeroForm::kPerRowAndColumn}) {
          for (const int64_t m : {1, 2, 5, 7, 13}) {
            for (const auto& [k, n] : kn) {
              for (const bool extremes : {false, true}) {
                SCOPED_TRACE(::testing::Message()
                             << Int8Gemm::PathName(path) << " a_signed=" << a_signed
                             << " b_signed=" << b_signed << " zero form " << static_cast<int>(form)
                             << " " << m << "x" << k << "x" << n << " extremes=" << extremes);
                const Tensor a = RandomBytes(Shape{m, k}, a_signed, extremes, rng);
                const Tensor b = RandomBytes(Shape{k, n}, b_signed, extremes, rng);
                Tensor azp, bzp;
                if (form != ZeroForm::kNone) {
                  const bool per = form == ZeroForm::kPerRowAndColumn;
                  azp = RandomBytes(per ? Shape{m} : Shape{}, a_signed, extremes, rng);
                  bzp = RandomBytes(per ? Shape{n} : Shape{}, b_signed, extremes, rng);
                }
                const Tensor* za = form == ZeroForm::kNone ? nullptr : &azp;
                const Tensor* zb = form == ZeroForm::kNone ? nullptr : &bzp;
                const Int8Gemm gemm(b.raw_data(), b_signed, k, n);
                ASSERT_EQ(gemm.path(), path);
                Int8GemmScratch scratch;
                // One value past the end of y: the tail stores must stay inside [m, n].
                std::vector<int32_t> y(m * n + 1, 12345);
                gemm.Run(a.raw_data(), a_signed, m, ZeroPointOf(za), ZeroPointOf(zb), y.data(),
                         scratch);
                EXPECT_EQ(y[m * n], 12345);
                const std::vector<int64_t> want = Reference(a, b, za, zb, m, k, n);
                for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(y[i], want[i]) << "element " << i;
              }
            }
          }
        }
      }
    }
  }
}

// k = 0: every sum is empty, whatever the zero points.
TEST_F(Int8GemmTest, EmptyInnerDimensionGivesZeros) {
  for (const auto& [isa, path] : Paths()) {
    SetMaxIsa(isa);
    const uint8_t zero_a = 7;
    const int8_t zero_b = -3;
    const Int8Gemm gemm(nullptr, /*b_signed=*/true, 0, 19);
    Int8GemmScratch scratch;
    std::vector<int32_t> y(3 * 19, 99);
    gemm.Run(nullptr, /*a_signed=*/false, 3, Int8ZeroPoint{&zero_a, false, 1},
             Int8ZeroPoint{&zero_b, true, 1}, y.data(), scratch);
    for (int32_t v : y) ASSERT_EQ(v, 0) << Int8Gemm::PathName(path);
  }
}

// A one-node graph of `op` whose input `constant_index` is a constant (null: none) and the rest
// are graph inputs; runs it on `inputs` (the constant's slot included) and returns output 0.
absl::StatusOr<Tensor> RunNode(const std::string& op, const std::vector<const Tensor*>& inputs,
                               int constant_index) {
  auto g = std::make_shared<Graph>();
  std::vector<ValueId> ids;
  std::vector<Value> feed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueId v = g->AddValue("in" + std::to_string(i));
    ids.push_back(v);
    if (static_cast<int>(i) == constant_index) {
      g->constants.emplace_back(v, std::make_shared<Tensor>(Tensor::ViewOf(*inputs[i])));
    } else {
      g->inputs.push_back(v);
      feed.push_back(Value(Tensor::ViewOf(*inputs[i])));
    }
  }
  const ValueId y = g->AddValue("y");
  Node node = MakeNode(op, ids, y);
  node.opset = 10;
  g->nodes.push_back(std::move(node));
  g->outputs = {y};
  LS_ASSIGN_OR_RETURN(auto model, Model::FromGraph(g));
  LS_ASSIGN_OR_RETURN(std::vector<Value> out, model->Run(std::move(feed), RunOptions()));
  Tensor t;
  t.CopyFrom(out[0].tensor());
  return t;
}

// MatMulInteger on batched A ([2, 3, k]) with a constant 2-D B (packed at load) and with a
// batched, broadcast B ([2, 1, k, n] against A [3, k]: packed per call), per-row and per-column
// zero points.
TEST_F(Int8GemmTest, MatMulIntegerKernelConstantAndBatchedB) {
  std::mt19937 rng(10);
  const int64_t k = 37, n = 70;
  for (const auto& [isa, path] : Paths()) {
    SetMaxIsa(isa);
    SCOPED_TRACE(Int8Gemm::PathName(path));
    const Tensor a = RandomBytes(Shape{2, 3, k}, /*is_signed=*/false, false, rng);
    const Tensor b = RandomBytes(Shape{k, n}, /*is_signed=*/true, false, rng);
    const Tensor azp = RandomBytes(Shape{3}, false, false, rng);
    const Tensor bzp = RandomBytes(Shape{n}, true, false, rng);
    for (const bool per_row : {false, true}) {
      const Tensor azp_scalar = RandomBytes(Shape{}, false, false, rng);
      const Tensor& za = per_row ? azp : azp_scalar;
      absl::StatusOr<Tensor> got = RunNode("MatMulInteger", {&a, &b, &za, &bzp}, 1);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->shape(), (Shape{2, 3, n}));
      for (int64_t batch = 0; batch < 2; ++batch) {
        Tensor a_batch(DataType::kUint8, Shape{3, k});
        std::memcpy(a_batch.mutable_raw_data(), a.data<uint8_t>() + batch * 3 * k, 3 * k);
        const std::vector<int64_t> want = Reference(a_batch, b, &za, &bzp, 3, k, n);
        for (int64_t i = 0; i < 3 * n; ++i) {
          ASSERT_EQ(got->data<int32_t>()[batch * 3 * n + i], want[i]) << batch << " " << i;
        }
      }
    }
    // B batched and broadcast against A: y[b, 0] = A x B[b, 0].
    const Tensor a2 = RandomBytes(Shape{3, k}, /*is_signed=*/true, false, rng);
    const Tensor b2 = RandomBytes(Shape{2, 1, k, n}, /*is_signed=*/false, false, rng);
    absl::StatusOr<Tensor> got = RunNode("MatMulInteger", {&a2, &b2}, -1);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->shape(), (Shape{2, 1, 3, n}));
    for (int64_t batch = 0; batch < 2; ++batch) {
      Tensor b_batch(DataType::kUint8, Shape{k, n});
      std::memcpy(b_batch.mutable_raw_data(), b2.data<uint8_t>() + batch * k * n, k * n);
      const std::vector<int64_t> want = Reference(a2, b_batch, nullptr, nullptr, 3, k, n);
      for (int64_t i = 0; i < 3 * n; ++i) {
        ASSERT_EQ(got->data<int32_t>()[batch * 3 * n + i], want[i]) << batch << " " << i;
      }
    }
  }
}

// A constant B in a product of at least DnnlInt8Gemm::kMinMultiplyAdds runs on oneDNN's brgemm
// (a primitive is created on a CPU with VNNI); every signedness and B zero-point form against the
// reference, and the same products with the oneDNN path turned off (Int8Gemm).
TEST_F(Int8GemmTest, LargeConstantProductsOnOneDnnAndNative) {
  std::mt19937 rng(13);
  const int64_t m = 16, k = 300, n = 70;  // 336000 multiply-adds
  ASSERT_GE(m * k * n, DnnlInt8Gemm::kMinMultiplyAdds);
  for (const bool use_dnnl : {true, false}) {
    DnnlInt8Gemm::SetEnabled(use_dnnl);
    for (const bool a_signed : {false, true}) {
      for (const bool b_signed : {false, true}) {
        for (const bool per_column : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "oneDNN " << use_dnnl << " a_signed=" << a_signed
                       << " b_signed=" << b_signed << " per_column=" << per_column);
          const Tensor a = RandomBytes(Shape{2, m / 2, k}, a_signed, false, rng);
          const Tensor b = RandomBytes(Shape{k, n}, b_signed, false, rng);
          const Tensor azp = RandomBytes(Shape{}, a_signed, false, rng);
          const Tensor bzp = RandomBytes(per_column ? Shape{n} : Shape{}, b_signed, false, rng);
          const int64_t before = DnnlPrimitiveCreationCount();
          absl::StatusOr<Tensor> got = RunNode("MatMulInteger", {&a, &b, &azp, &bzp}, 1);
          ASSERT_TRUE(got.ok()) << got.status();
          if (use_dnnl && Int8Gemm::BestPath() == Int8Gemm::Path::kAvx512Vnni) {
            EXPECT_GT(DnnlPrimitiveCreationCount(), before) << "the product did not use oneDNN";
          } else if (!use_dnnl) {
            EXPECT_EQ(DnnlPrimitiveCreationCount(), before);
          }
          Tensor a2(a.dtype(), Shape{m, k});
          std::memcpy(a2.mutable_raw_data(), a.raw_data(), m * k);
          const std::vector<int64_t> want = Reference(a2, b, &azp, &bzp, m, k, n);
          ASSERT_EQ(got->NumElements(), m * n);
          for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(got->data<int32_t>()[i], want[i]) << i;
        }
      }
    }
  }
  DnnlInt8Gemm::SetEnabled(true);
}

// QLinearMatMul with a constant int8 B: the requantization of the ONNX definition
// (saturate(round(acc * a_scale * b_scale / y_scale) + y_zero_point)) applied to the int64 sums.
TEST_F(Int8GemmTest, QLinearMatMulKernelMatchesDefinition) {
  std::mt19937 rng(11);
  const int64_t m = 5, k = 45, n = 33;
  for (const auto& [isa, path] : Paths()) {
    SetMaxIsa(isa);
    SCOPED_TRACE(Int8Gemm::PathName(path));
    const Tensor a = RandomBytes(Shape{m, k}, false, false, rng);
    const Tensor b = RandomBytes(Shape{k, n}, true, false, rng);
    Tensor a_scale(DataType::kFloat32, Shape{}), b_scale(DataType::kFloat32, Shape{}),
        y_scale(DataType::kFloat32, Shape{});
    a_scale.mutable_data<float>()[0] = 0.02f;
    b_scale.mutable_data<float>()[0] = 0.01f;
    y_scale.mutable_data<float>()[0] = 0.3f;
    Tensor azp(DataType::kUint8, Shape{}), bzp(DataType::kInt8, Shape{}),
        yzp(DataType::kUint8, Shape{});
    azp.mutable_data<uint8_t>()[0] = 120;
    bzp.mutable_data<int8_t>()[0] = -2;
    yzp.mutable_data<uint8_t>()[0] = 128;
    absl::StatusOr<Tensor> got =
        RunNode("QLinearMatMul", {&a, &a_scale, &azp, &b, &b_scale, &bzp, &y_scale, &yzp}, 3);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->dtype(), DataType::kUint8);
    const std::vector<int64_t> sums = Reference(a, b, &azp, &bzp, m, k, n);
    const float multiplier = 0.02f * 0.01f / 0.3f;
    for (int64_t i = 0; i < m * n; ++i) {
      const double v =
          std::nearbyint(static_cast<double>(static_cast<float>(sums[i]) * multiplier)) + 128;
      const int want = static_cast<int>(std::min(255.0, std::max(0.0, v)));
      ASSERT_EQ(got->data<uint8_t>()[i], want) << i;
    }
  }
}

// QLinearMatMul with a's scale and zero point per row and b's per column (int8 a, uint8 b, int8
// y), against the definition applied per element; a scale count that is neither 1 nor the row
// count is refused.
TEST_F(Int8GemmTest, QLinearMatMulPerRowAndPerColumnScales) {
  std::mt19937 rng(14);
  const int64_t m = 3, k = 29, n = 21;
  const Tensor a = RandomBytes(Shape{m, k}, true, false, rng);
  const Tensor b = RandomBytes(Shape{k, n}, false, false, rng);
  const Tensor azp = RandomBytes(Shape{m}, true, false, rng);
  const Tensor bzp = RandomBytes(Shape{n}, false, false, rng);
  Tensor a_scale(DataType::kFloat32, Shape{m}), b_scale(DataType::kFloat32, Shape{n}),
      y_scale(DataType::kFloat32, Shape{});
  for (int64_t i = 0; i < m; ++i) a_scale.mutable_data<float>()[i] = 0.01f * (i + 1);
  for (int64_t j = 0; j < n; ++j) b_scale.mutable_data<float>()[j] = 0.003f * (j + 1);
  y_scale.mutable_data<float>()[0] = 0.7f;
  Tensor yzp(DataType::kInt8, Shape{});
  yzp.mutable_data<int8_t>()[0] = -5;
  absl::StatusOr<Tensor> got =
      RunNode("QLinearMatMul", {&a, &a_scale, &azp, &b, &b_scale, &bzp, &y_scale, &yzp}, 3);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->dtype(), DataType::kInt8);
  const std::vector<int64_t> sums = Reference(a, b, &azp, &bzp, m, k, n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float multiplier = a_scale.data<float>()[i] * b_scale.data<float>()[j] / 0.7f;
      const double v =
          std::nearbyint(static_cast<double>(static_cast<float>(sums[i * n + j]) * multiplier)) - 5;
      const int want = static_cast<int>(std::min(127.0, std::max(-128.0, v)));
      ASSERT_EQ(got->data<int8_t>()[i * n + j], want) << i << " " << j;
    }
  }
  Tensor two(DataType::kFloat32, Shape{2});
  two.mutable_data<float>()[0] = two.mutable_data<float>()[1] = 1.0f;
  absl::StatusOr<Tensor> bad =
      RunNode("QLinearMatMul", {&a, &two, &azp, &b, &b_scale, &bzp, &y_scale, &yzp}, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("a_scale"), std::string::npos) << bad.status();
}

// quantize_dynamic's MatMulInteger -> Cast -> Mul(scale) -> Add -> Relu: fuse_int_matmul makes
// one kFusedMatMulIntegerOp node of it, and the model's output equals the definition computed in
// float32 in the same order, for an addend of the product's shape (the epilogue in place) and one
// that broadcasts it to [2, m, n].
TEST_F(Int8GemmTest, FusedCastAndEpilogueMatchUnfusedDefinition) {
  std::mt19937 rng(15);
  const int64_t m = 4, k = 50, n = 40;
  const Tensor a = RandomBytes(Shape{m, k}, false, false, rng);
  const Tensor b = RandomBytes(Shape{k, n}, true, false, rng);
  const Tensor azp = RandomBytes(Shape{}, false, false, rng);
  const Tensor bzp = RandomBytes(Shape{}, true, false, rng);
  Tensor scale(DataType::kFloat32, Shape{});
  scale.mutable_data<float>()[0] = 0.00123f;
  const std::vector<int64_t> sums = Reference(a, b, &azp, &bzp, m, k, n);
  for (const bool broadcast : {false, true}) {
    SCOPED_TRACE(broadcast ? "addend [2, m, n]" : "addend [m, n]");
    const Shape addend_shape = broadcast ? Shape{2, m, n} : Shape{m, n};
    Tensor addend(DataType::kFloat32, addend_shape);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < addend.NumElements(); ++i) addend.mutable_data<float>()[i] = dist(rng);

    auto g = std::make_shared<Graph>();
    const ValueId va = g->AddValue("a"), vb = g->AddValue("b"), vazp = g->AddValue("azp"),
                  vbzp = g->AddValue("bzp"), vs = g->AddValue("s"), vadd = g->AddValue("addend"),
                  vi = g->AddValue("i32"), vf = g->AddValue("f"), vm = g->AddValue("m"),
                  vsum = g->AddValue("sum"), vy = g->AddValue("y");
    g->constants.emplace_back(vb, std::make_shared<Tensor>(Tensor::ViewOf(b)));
    g->constants.emplace_back(vbzp, std::make_shared<Tensor>(Tensor::ViewOf(bzp)));
    Node matmul = MakeNode("MatMulInteger", {va, vb, vazp, vbzp}, vi);
    matmul.opset = 10;
    Node cast = MakeNode("Cast", {vi}, vf);
    cast.attributes["to"].type = Attribute::Type::kInt;
    cast.attributes["to"].i = 1;
    g->nodes.push_back(std::move(matmul));
    g->nodes.push_back(std::move(cast));
    g->nodes.push_back(MakeNode("Mul", {vf, vs}, vm));
    g->nodes.push_back(MakeNode("Add", {vm, vadd}, vsum));
    g->nodes.push_back(MakeNode("Relu", {vsum}, vy));
    g->inputs = {va, vazp, vs, vadd};
    g->outputs = {vy};

    // The pass alone: one fused node with the three post-ops.
    Graph copy = *g;
    transform::TransformContext context;
    context.find_constant = [&](ValueId id) -> const Tensor* {
      for (const auto& [v, t] : copy.constants) {
        if (v == id) return t.get();
      }
      return nullptr;
    };
    std::vector<std::string> log;
    ASSERT_TRUE(transform::FuseIntMatMulPass().Run(copy, context, log).ok());
    ASSERT_EQ(copy.nodes.size(), 1u);
    EXPECT_EQ(copy.nodes[0].op_type, kFusedMatMulIntegerOp);
    ASSERT_NE(copy.nodes[0].fusion, nullptr);
    EXPECT_EQ(copy.nodes[0].fusion->post_ops.size(), 3u);

    auto model = Model::FromGraph(g);
    ASSERT_TRUE(model.ok()) << model.status();
    std::vector<Value> feed;
    feed.push_back(Value(Tensor::ViewOf(a)));
    feed.push_back(Value(Tensor::ViewOf(azp)));
    feed.push_back(Value(Tensor::ViewOf(scale)));
    feed.push_back(Value(Tensor::ViewOf(addend)));
    auto out = (*model)->Run(std::move(feed), RunOptions());
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& y = (*out)[0].tensor();
    ASSERT_EQ(y.shape(), addend_shape);
    for (int64_t i = 0; i < y.NumElements(); ++i) {
      const float product = static_cast<float>(sums[i % (m * n)]) * 0.00123f;
      const float want = std::max(0.0f, product + addend.data<float>()[i]);
      ASSERT_EQ(y.data<float>()[i], want) << i;
    }
  }
}

// QuantizeLinear per tensor (the vector loops) on every ISA cap, to uint8 and int8, against the
// ONNX formula (y = saturate(round(x / scale) + zero point), round half to even, the division in
// float32): lengths around the 8/16-float vectors, values on exact halves, beyond the range, NaN
// (the lowest value, as in the per-axis loop) and infinities; DequantizeLinear inverts it exactly.
TEST_F(Int8GemmTest, QuantizeLinearPerTensorMatchesFormula) {
  std::mt19937 rng(21);
  const float scale = 0.037f;
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > DetectedIsa()) continue;
    SetMaxIsa(isa);
    for (const bool is_signed : {false, true}) {
      for (const int64_t len : {1, 7, 8, 15, 16, 17, 33, 1027}) {
        SCOPED_TRACE(::testing::Message()
                     << IsaName(isa) << (is_signed ? " int8" : " uint8") << " length " << len);
        Tensor x(DataType::kFloat32, Shape{len});
        std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
        for (int64_t i = 0; i < len; ++i) x.mutable_data<float>()[i] = dist(rng);
        for (int64_t i = 1; i < len; i += 5) {
          x.mutable_data<float>()[i] = (static_cast<float>(i % 100) - 50.0f + 0.5f) * scale;
        }
        if (len > 9) {
          x.mutable_data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
          x.mutable_data<float>()[4] = std::numeric_limits<float>::infinity();
          x.mutable_data<float>()[9] = -std::numeric_limits<float>::infinity();
        }
        Tensor s(DataType::kFloat32, Shape{});
        s.mutable_data<float>()[0] = scale;
        Tensor zp(is_signed ? DataType::kInt8 : DataType::kUint8, Shape{});
        const int zero = is_signed ? -7 : 131;
        static_cast<uint8_t*>(zp.mutable_raw_data())[0] = static_cast<uint8_t>(zero);
        absl::StatusOr<Tensor> q = RunNode("QuantizeLinear", {&x, &s, &zp}, -1);
        ASSERT_TRUE(q.ok()) << q.status();
        ASSERT_EQ(q->dtype(), zp.dtype());
        const double lowest = is_signed ? -128 : 0, highest = is_signed ? 127 : 255;
        for (int64_t i = 0; i < len; ++i) {
          const float v = x.data<float>()[i];
          const double want =
              std::isnan(v)
                  ? lowest
                  : std::min(
                        highest,
                        std::max(lowest, static_cast<double>(std::nearbyint(v / scale)) + zero));
          ASSERT_EQ(ValueAt(*q, i), static_cast<int64_t>(want)) << i << ": " << v;
        }
        absl::StatusOr<Tensor> back = RunNode("DequantizeLinear", {&*q, &s, &zp}, -1);
        ASSERT_TRUE(back.ok()) << back.status();
        for (int64_t i = 0; i < len; ++i) {
          ASSERT_EQ(back->data<float>()[i], static_cast<float>(ValueAt(*q, i) - zero) * scale);
        }
      }
    }
  }
}

// DynamicQuantizeLinear on every ISA cap against the ONNX formula in float32: scale = (max(0, x)
// - min(0, x)) / 255, zero point = saturate(round(-min / scale)), y = saturate(round(x / scale) +
// zero point), round half to even; lengths around the 8/16-float vectors, values on exact halves.
TEST_F(Int8GemmTest, DynamicQuantizeLinearMatchesFormula) {
  std::mt19937 rng(12);
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > DetectedIsa()) continue;
    SetMaxIsa(isa);
    for (const int64_t len : {1, 7, 8, 15, 16, 17, 33, 100, 1027}) {
      for (const bool positive : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << IsaName(isa) << " length " << len << " positive " << positive);
        Tensor x(DataType::kFloat32, Shape{len});
        std::uniform_real_distribution<float> dist(positive ? 0.0f : -3.0f, 5.0f);
        for (int64_t i = 0; i < len; ++i) x.mutable_data<float>()[i] = dist(rng);
        float lo = 0, hi = 0;
        for (int64_t i = 0; i < len; ++i) {
          lo = std::min(lo, x.data<float>()[i]);
          hi = std::max(hi, x.data<float>()[i]);
        }
        const float scale = (hi - lo) / 255.0f;
        // Exact halves: x = (q + 0.5) * scale for a few q (when representable, it rounds to even).
        for (int64_t i = 1; i < len; i += 5) {
          x.mutable_data<float>()[i] = (static_cast<float>(i % 200) + 0.5f) * scale + lo;
        }
        lo = 0;
        hi = 0;
        for (int64_t i = 0; i < len; ++i) {
          lo = std::min(lo, x.data<float>()[i]);
          hi = std::max(hi, x.data<float>()[i]);
        }
        const float s = (hi - lo) / 255.0f;
        const float zf = std::nearbyint(std::min(255.0f, std::max(0.0f, -lo / s)));
        const uint8_t zero = static_cast<uint8_t>(zf);
        auto g = std::make_shared<Graph>();
        const ValueId in = g->AddValue("x");
        const ValueId y = g->AddValue("y"), ys = g->AddValue("ys"), yz = g->AddValue("yz");
        Node node = MakeNode("DynamicQuantizeLinear", {in}, y);
        node.opset = 11;
        node.outputs = {y, ys, yz};
        g->nodes.push_back(std::move(node));
        g->inputs = {in};
        g->outputs = {y, ys, yz};
        auto model = Model::FromGraph(g);
        ASSERT_TRUE(model.ok()) << model.status();
        std::vector<Value> feed;
        feed.push_back(Value(Tensor::ViewOf(x)));
        auto out = (*model)->Run(std::move(feed), RunOptions());
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ((*out)[1].tensor().data<float>()[0], s);
        EXPECT_EQ((*out)[2].tensor().data<uint8_t>()[0], zero);
        const uint8_t* got = (*out)[0].tensor().data<uint8_t>();
        for (int64_t i = 0; i < len; ++i) {
          const float q = std::nearbyint(x.data<float>()[i] / s) + zf;
          const int want = static_cast<int>(std::min(255.0f, std::max(0.0f, q)));
          ASSERT_EQ(got[i], want) << "element " << i << " x " << x.data<float>()[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace loopserve::engine::native
