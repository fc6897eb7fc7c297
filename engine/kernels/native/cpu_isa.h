#pragma once

// The vector instruction set the engine's own kernels (vector math, the packed one-row matmul,
// fused elementwise chains) dispatch to, decided at run time: the best the CPU and OS support,
// capped by the environment variable LOOPSERVE_MAX_ISA ("avx512", "avx2" or "scalar"; read once)
// or by SetMaxIsa. Capping lets an AVX-512 machine measure and test the AVX2 paths an AVX2-only
// CPU would take (oneDNN has its own cap: ONEDNN_MAX_CPU_ISA=AVX2). Thread-safe.

#include <cstdint>

namespace loopserve::engine::native {

enum class Isa : uint8_t { kScalar, kAvx2, kAvx512 };

// What the CPU supports: AVX-512F (+ FMA), AVX2 + FMA, or neither.
Isa DetectedIsa();

// DetectedIsa() capped by LOOPSERVE_MAX_ISA and SetMaxIsa. Kernels that pack data for one ISA at
// load keep using it; the cap applies to what is prepared after it changes.
Isa ActiveIsa();

// Caps ActiveIsa() process-wide (benchmarks, tests that cover the AVX2 path on AVX-512 CPUs).
void SetMaxIsa(Isa isa);

// "avx512", "avx2" or "scalar".
const char* IsaName(Isa isa);

}  // namespace loopserve::engine::native
