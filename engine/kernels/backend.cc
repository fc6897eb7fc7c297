#include "engine/kernels/backend.h"

#include <cstdint>
#include <dnnl.hpp>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/kernels/native/packed_gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace loopserve::engine {
namespace {

using native::Int8Gemm;
using native::Isa;

constexpr int64_t kAnyRows = INT64_MAX;

// AVX-512 classes keep oneDNN's brgemm past 128 rows (native::PackedGemm::kMaxRowsAvx512); AVX2
// has no brgemm in oneDNN 2.6, so the packed product takes every row count.
constexpr BackendTable kAvx512Amx = {"avx512_amx",
                                     "Sapphire Rapids, Emerald Rapids, Granite Rapids",
                                     Isa::kAvx512,
                                     /*packed_gemv=*/true,
                                     native::PackedGemm::kMaxRowsAvx512,
                                     /*lstm_fused=*/true,
                                     Int8Gemm::Path::kAvx512Vnni,
                                     /*int8_dnnl_brgemm=*/true};
constexpr BackendTable kAvx512Vnni = {"avx512_vnni",
                                      "Cascade Lake, Ice Lake, Zen 4, Zen 5",
                                      Isa::kAvx512,
                                      /*packed_gemv=*/true,
                                      native::PackedGemm::kMaxRowsAvx512,
                                      /*lstm_fused=*/true,
                                      Int8Gemm::Path::kAvx512Vnni,
                                      /*int8_dnnl_brgemm=*/false};
constexpr BackendTable kAvx512 = {"avx512",
                                  "Skylake-SP (AVX-512F without VNNI)",
                                  Isa::kAvx512,
                                  /*packed_gemv=*/true,
                                  native::PackedGemm::kMaxRowsAvx512,
                                  /*lstm_fused=*/true,
                                  Int8Gemm::Path::kAvx2,
                                  /*int8_dnnl_brgemm=*/false};
constexpr BackendTable kAvx2 = {"avx2",
                                "Haswell to Alder Lake, Zen 1-3 (AVX2 + FMA)",
                                Isa::kAvx2,
                                /*packed_gemv=*/true,
                                kAnyRows,
                                /*lstm_fused=*/true,
                                Int8Gemm::Path::kAvx2,
                                /*int8_dnnl_brgemm=*/false};
constexpr BackendTable kScalar = {"scalar",
                                  "no AVX2 + FMA",
                                  Isa::kScalar,
                                  /*packed_gemv=*/false,
                                  /*packed_gemm_max_rows=*/0,
                                  /*lstm_fused=*/false,
                                  Int8Gemm::Path::kScalar,
                                  /*int8_dnnl_brgemm=*/false};

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  // libgcc's checks include the OS's XSAVE support for the wider registers.
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  f.avx512_vnni =
      f.avx512f && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    f.avx512_bf16 = f.avx512f && ((eax >> 5) & 1) != 0;
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    f.amx_bf16 = ((edx >> 22) & 1) != 0;
    f.amx_int8 = ((edx >> 25) & 1) != 0;
  }
#endif
  return f;
}

}  // namespace

const BackendTable& ChooseBackend(const CpuFeatures& f, Isa cap) {
  if (cap == Isa::kAvx512 && f.avx512f) {
    if (f.avx512_vnni && f.amx_int8 && f.amx_bf16) return kAvx512Amx;
    if (f.avx512_vnni) return kAvx512Vnni;
    return kAvx512;
  }
  if (cap >= Isa::kAvx2 && f.avx2_fma) return kAvx2;
  return kScalar;
}

const CpuFeatures& DetectedCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

const std::vector<const BackendTable*>& BackendTables() {
  static const std::vector<const BackendTable*> tables = {&kAvx512Amx, &kAvx512Vnni, &kAvx512,
                                                          &kAvx2, &kScalar};
  return tables;
}

const BackendTable& ActiveBackend() {
  // One choice per cap, made at the first call.
  static const BackendTable* const per_cap[] = {
      &ChooseBackend(DetectedCpuFeatures(), Isa::kScalar),
      &ChooseBackend(DetectedCpuFeatures(), Isa::kAvx2),
      &ChooseBackend(DetectedCpuFeatures(), Isa::kAvx512),
  };
  return *per_cap[static_cast<int>(native::ActiveIsa())];
}

std::string DescribeBackend(const BackendTable& t) {
  const CpuFeatures& f = DetectedCpuFeatures();
  const std::string isa = native::IsaName(t.vector_isa);
  const bool vector = t.vector_isa != Isa::kScalar;
  std::string text =
      absl::StrCat("backend ", t.name, " (", t.cpus, "); cpu:", f.avx2_fma ? " avx2_fma" : "",
                   f.avx512f ? " avx512f" : "", f.avx512_vnni ? " avx512_vnni" : "",
                   f.avx512_bf16 ? " avx512_bf16" : "", f.amx_bf16 ? " amx_bf16" : "",
                   f.amx_int8 ? " amx_int8" : "", "\n");
  auto row = [&](const char* family, const char* dtype, const std::string& implementation) {
    absl::StrAppend(&text, family, "\t", dtype, "\t", implementation, "\n");
  };
  const std::string vector_math =
      vector ? absl::StrCat("native vector math (", isa, ", SLEEF)") : "native scalar loop";
  row("elementwise, up to 64K elements; fused chains", "f32",
      vector ? absl::StrCat("native elementwise chain (", isa, ")") : "native scalar chain");
  row("elementwise, larger", "f32", "oneDNN eltwise / binary");
  row("Sin Cos Tan Asin Acos Atan Erf Round Mish", "f32", vector_math);
  row("Softmax, LayerNormalization rows; Reduce*", "f32", vector_math);
  row("MatMul / Gemm, 1 row, constant B", "f32",
      t.packed_gemv ? absl::StrCat("native packed_gemv (", isa, ")") : "oneDNN matmul");
  row("MatMul / Gemm, more rows, constant 2-D B", "f32",
      t.packed_gemm_max_rows == 0 ? std::string("oneDNN matmul")
      : t.packed_gemm_max_rows == kAnyRows
          ? absl::StrCat("native packed_gemm (", isa, ")")
          : absl::StrCat("native packed_gemm (", isa, ") up to ", t.packed_gemm_max_rows,
                         " rows, then oneDNN matmul (brgemm)"));
  row("MatMul, batched matrix-vector", "f32", "native batched_gemv");
  row("MatMul / Gemm, other", "f32", "oneDNN matmul");
  row("Conv, ConvTranspose, pooling, normalization", "f32", "oneDNN (blocked layouts)");
  row("LSTM, batch 1, constant weights", "f32",
      t.lstm_fused ? absl::StrCat("native lstm_fused (", isa, ")") : "oneDNN lstm_forward");
  row("RNN / GRU / LSTM, other", "f32", "oneDNN rnn primitives (native where they lack)");
  row("MatMulInteger, QLinearMatMul", "u8/i8",
      absl::StrCat(
          "native int8_gemm (", native::Int8Gemm::PathName(t.int8_gemm), ")",
          t.int8_dnnl_brgemm ? "; constant B: oneDNN brgemm (AMX-INT8) where faster" : ""));
  row("_MatMulBf16 (--precision=bf16)", "bf16",
      f.avx512_bf16 || f.amx_bf16 ? "oneDNN matmul (AVX512_BF16 / AMX-BF16)"
                                  : "refused at load (no native bf16)");
  row("integer, bool, shape and index ops", "i64/i32/bool", "native");
  row("float64 and other element types", "f64", "reference");
  return text;
}

std::string DescribeActiveBackend() { return DescribeBackend(ActiveBackend()); }

absl::Status SetVectorIsaCap(absl::string_view isa) {
  Isa cap;
  dnnl::cpu_isa dnnl_cap;
  if (isa == "avx512") {
    cap = Isa::kAvx512;
    dnnl_cap = dnnl::cpu_isa::all;
  } else if (isa == "avx2") {
    cap = Isa::kAvx2;
    dnnl_cap = dnnl::cpu_isa::avx2;
  } else if (isa == "scalar") {
    cap = Isa::kScalar;
    dnnl_cap = dnnl::cpu_isa::sse41;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ISA '", isa, "' (expected avx512, avx2 or scalar)"));
  }
  try {
    dnnl::set_max_cpu_isa(dnnl_cap);
  } catch (const dnnl::error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "oneDNN refused the ISA cap '", isa, "' (set it before any model loads): ", e.what()));
  }
  native::SetMaxIsa(cap);
  return absl::OkStatus();
}

}  // namespace loopserve::engine
