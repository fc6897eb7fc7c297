#include "engine/kernels/backend.h"

#include <set>
#include <string>

#include "engine/engine.h"
#include "engine/ir/eltwise_fn.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/int8_gemm.h"
#include "engine/kernels/native/packed_gemm.h"
#include "engine/kernels/native/packed_gemv.h"
#include "engine/kernels/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

using native::Isa;
using ::testing::HasSubstr;

// CPUs by their documented features (Intel's and AMD's ISA references).
CpuFeatures SapphireRapids() { return {true, true, true, true, true, true}; }
CpuFeatures Zen4() { return {true, true, true, true, false, false}; }
CpuFeatures SkylakeSp() { return {true, true, false, false, false, false}; }
CpuFeatures Haswell() { return {true, false, false, false, false, false}; }
CpuFeatures NoAvx2() { return {}; }

TEST(BackendTableTest, EachCpuClassGetsItsTable) {
  EXPECT_STREQ(ChooseBackend(SapphireRapids(), Isa::kAvx512).name, "avx512_amx");
  EXPECT_STREQ(ChooseBackend(Zen4(), Isa::kAvx512).name, "avx512_vnni");
  EXPECT_STREQ(ChooseBackend(SkylakeSp(), Isa::kAvx512).name, "avx512");
  EXPECT_STREQ(ChooseBackend(Haswell(), Isa::kAvx512).name, "avx2");
  EXPECT_STREQ(ChooseBackend(NoAvx2(), Isa::kAvx512).name, "scalar");
}

TEST(BackendTableTest, TheIsaCapChoosesALowerTable) {
  EXPECT_STREQ(ChooseBackend(SapphireRapids(), Isa::kAvx2).name, "avx2");
  EXPECT_STREQ(ChooseBackend(SapphireRapids(), Isa::kScalar).name, "scalar");
  EXPECT_STREQ(ChooseBackend(Haswell(), Isa::kScalar).name, "scalar");
}

TEST(BackendTableTest, TablesSayWhatTheirClassRuns) {
  const BackendTable& amx = ChooseBackend(SapphireRapids(), Isa::kAvx512);
  EXPECT_EQ(amx.vector_isa, Isa::kAvx512);
  EXPECT_EQ(amx.int8_gemm, native::Int8Gemm::Path::kAvx512Vnni);
  EXPECT_TRUE(amx.int8_dnnl_brgemm);
  EXPECT_EQ(amx.packed_gemm_max_rows, native::PackedGemm::kMaxRowsAvx512);
  const BackendTable& skx = ChooseBackend(SkylakeSp(), Isa::kAvx512);
  EXPECT_EQ(skx.int8_gemm, native::Int8Gemm::Path::kAvx2);  // no VNNI
  const BackendTable& avx2 = ChooseBackend(Haswell(), Isa::kAvx2);
  EXPECT_EQ(avx2.vector_isa, Isa::kAvx2);
  EXPECT_GT(avx2.packed_gemm_max_rows, int64_t{1} << 40);  // no brgemm below AVX-512
  const BackendTable& scalar = ChooseBackend(NoAvx2(), Isa::kScalar);
  EXPECT_FALSE(scalar.packed_gemv);
  EXPECT_EQ(scalar.packed_gemm_max_rows, 0);
  EXPECT_FALSE(scalar.lstm_fused);
  std::set<std::string> names;
  for (const BackendTable* t : BackendTables()) names.insert(t->name);
  EXPECT_EQ(names.size(), BackendTables().size());
}

// Under every cap the CPU allows, the active table agrees with what the kernels choose.
TEST(BackendTableTest, ActiveTableMatchesTheKernelsChoices) {
  const Isa detected = native::DetectedIsa();
  for (Isa cap : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    native::SetMaxIsa(cap);
    const BackendTable& t = ActiveBackend();
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.vector_isa, native::ActiveIsa());
    EXPECT_LE(static_cast<int>(t.vector_isa), static_cast<int>(detected));
    EXPECT_EQ(t.int8_gemm, native::Int8Gemm::BestPath());
    EXPECT_EQ(native::PackedGemv::Available(), t.packed_gemv);
    EXPECT_EQ(native::PackedGemm::Preferred(1), t.packed_gemm_max_rows >= 1);
    EXPECT_EQ(native::PackedGemm::Preferred(129), t.packed_gemm_max_rows >= 129);
    EXPECT_THAT(DescribeBackend(t), HasSubstr(std::string("backend ") + t.name));
  }
  native::SetMaxIsa(Isa::kAvx512);
}

TEST(BackendTableTest, DescriptionNamesEveryFamily) {
  const std::string text = DescribeActiveBackend();
  EXPECT_THAT(text, HasSubstr("MatMul / Gemm, 1 row, constant B\tf32\t"));
  EXPECT_THAT(text, HasSubstr("MatMulInteger, QLinearMatMul\tu8/i8\tnative int8_gemm ("));
  EXPECT_THAT(text, HasSubstr("float64 and other element types\tf64\treference"));
}

TEST(BackendTableTest, UnknownIsaCapIsRefused) {
  const absl::Status status = SetVectorIsaCap("avx9000");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("avx9000"));
}

// The elementwise table: unique names, lookups by ONNX op, and every op it registers is in the
// built-in kernel table.
TEST(EltwiseTableTest, RowsAreConsistent) {
  std::set<std::string> names;
  for (int i = 0; i < kNumEltwiseFns; ++i) {
    const EltwiseFn fn = static_cast<EltwiseFn>(i);
    EXPECT_TRUE(names.insert(EltwiseFnName(fn)).second) << EltwiseFnName(fn);
    const uint32_t flags = EltwiseFnFlags(fn);
    EltwiseFn found = EltwiseFn::kCount;
    if (flags & kEltwiseFuse) {
      EXPECT_TRUE(EltwiseFnOfOp(EltwiseFnName(fn), kEltwiseFuse, &found));
      EXPECT_EQ(found, fn);
    }
    if (flags & (kEltwiseDnnl | kEltwiseVector)) {
      EXPECT_NE(KernelRegistry::Builtin().Find(EltwiseFnName(fn), 13), nullptr)
          << EltwiseFnName(fn);
    }
  }
  for (int i = 0; i < kNumArithOps; ++i) {
    const ArithOp op = static_cast<ArithOp>(i);
    if (ArithOpFlags(op) & kEltwiseDnnl) {
      EXPECT_NE(KernelRegistry::Builtin().Find(ArithOpName(op), 13), nullptr) << ArithOpName(op);
    }
  }
  EltwiseFn fn;
  EXPECT_FALSE(EltwiseFnOfOp("Sin", kEltwiseFuse, &fn));  // not fused today
  EXPECT_TRUE(EltwiseFnOfOp("Sin", kEltwiseVector, &fn));
  EXPECT_EQ(fn, EltwiseFn::kSin);
  EXPECT_STREQ(EltwiseFnName(EltwiseFn::kCount), "?");
}

// The scalar definitions against the functions' formulas (ONNX operator spec) at a few points.
TEST(EltwiseTableTest, ScalarDefinitionsFollowTheSpec) {
  EXPECT_EQ(EltwiseScalar<double>(EltwiseFn::kRelu, -2.0), 0.0);
  EXPECT_NEAR(EltwiseScalar<double>(EltwiseFn::kSoftplus, 1.5), std::log(1 + std::exp(1.5)), 1e-12);
  EXPECT_NEAR(EltwiseScalar<double>(EltwiseFn::kMish, 0.7),
              0.7 * std::tanh(std::log(1 + std::exp(0.7))), 1e-12);
  EXPECT_EQ(EltwiseScalar<float>(EltwiseFn::kClip, 5.0f, -1.0f, 2.0f), 2.0f);
  EXPECT_TRUE(std::isnan(EltwiseScalar<float>(EltwiseFn::kClip, NAN, -1.0f, 2.0f)));
  EXPECT_EQ(EltwiseScalar<float>(EltwiseFn::kHardSigmoid, 10.0f, 0.2f, 0.5f), 1.0f);
  EXPECT_EQ(EltwiseScalar<double>(EltwiseFn::kRound, 2.5), 2.0);  // half to even
  EXPECT_EQ(ArithScalar<float>(ArithOp::kPRelu, -2.0f, 0.25f), -0.5f);
  EXPECT_TRUE(std::isnan(ArithScalar<float>(ArithOp::kMax, 1.0f, NAN)));
}

}  // namespace
}  // namespace loopserve::engine
