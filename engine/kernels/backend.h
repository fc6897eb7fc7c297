#pragma once

// One back-end table per CPU class (XNNPACK's per-CPU configs are the model): which
// implementation runs each family of ops and element type (a oneDNN primitive, a native kernel
// for an ISA, or a reference kernel). The CPU's features are detected once; the table is chosen
// from them and the vector-ISA cap (LOOPSERVE_MAX_ISA, native::SetMaxIsa, `looprun --isa`), once
// per cap. Kernels read the fields they depend on (native packed products, the fused LSTM step,
// the vector math's ISA) from ActiveBackend() instead of testing CPU features themselves;
// `looprun --print_backend` prints the active table. The tables are constants: thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/int8_gemm.h"

namespace loopserve::engine {

// What the CPU and OS offer (libgcc's / CPUID's checks, detected once).
struct CpuFeatures {
  bool avx2_fma = false;
  bool avx512f = false;
  bool avx512_vnni = false;  // with AVX512BW
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
};
const CpuFeatures& DetectedCpuFeatures();

struct BackendTable {
  const char* name;  // "avx512_amx", "avx512_vnni", "avx512", "avx2", "scalar"
  const char* cpus;  // examples of the class
  // The native vector code's ISA: vector math, elementwise chains, row reductions and selections,
  // quantization, the packed products and the fused LSTM step.
  native::Isa vector_isa;
  // Float32 products with constant weights: one row on native::PackedGemv, up to
  // packed_gemm_max_rows rows on native::PackedGemm (0: none), more on oneDNN's matmul.
  bool packed_gemv;
  int64_t packed_gemm_max_rows;
  // The LSTM at batch 1 with constant weights on native::LstmFusedStep.
  bool lstm_fused;
  // 8-bit products (MatMulInteger, QLinearMatMul, _FusedMatMulInteger) on native::Int8Gemm's path;
  // constant-B products where it measured faster on oneDNN's brgemm int8 (AMX or VNNI) when
  // int8_dnnl_brgemm.
  native::Int8Gemm::Path int8_gemm;
  bool int8_dnnl_brgemm;
};

// The named tables, best CPU class first.
const std::vector<const BackendTable*>& BackendTables();

// The best table `features` allow with vector code of `cap` at most.
const BackendTable& ChooseBackend(const CpuFeatures& features, native::Isa cap);

// ChooseBackend(DetectedCpuFeatures(), native::ActiveIsa()), chosen once per cap.
const BackendTable& ActiveBackend();

// The table as text: its name, the CPU's features, one line per (op family, element type) naming
// the implementation (looprun --print_backend).
std::string DescribeBackend(const BackendTable& table);

}  // namespace loopserve::engine
