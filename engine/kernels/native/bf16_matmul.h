#pragma once

// Opt-in bf16 products (LoadOptions::precision = kBf16; engine/transform/bf16_products.h makes the
// kBf16MatMulOp nodes): A rounded to bfloat16 (nearest even) per run, the constant B rounded once
// at load, the product accumulated in float32 by oneDNN's matmul (AVX512_BF16 `vdpbf16ps` or AMX
// tiles), the fused node's post-ops applied in float32 after it.
//
// Error bound (documented in README, tested in bf16_matmul_test): each bf16 operand carries a
// relative rounding error of at most 2^-9, so every output satisfies
//   |y_bf16 - y_fp32| <= 2^-7 * sum_p |a_ip| |b_pj|   (plus float32 accumulation, ~k 2^-24 of it),
// i.e. about 3 significant decimal digits of the sum of magnitudes; a post-op chain adds its
// own float32 rounding (and a saturating one, e.g. tanh, can only shrink the difference).

#include <cstdint>

namespace loopserve::engine::native {

// Whether the CPU computes bf16 products natively (AVX512_BF16 or AMX-BF16, from CPUID); without
// either oneDNN emulates them, slower than float32.
bool CpuHasNativeBf16();

// Whether oneDNN has a bf16 matmul here at all (natively or emulated on AVX-512; not on an
// AVX2-only CPU or under ONEDNN_MAX_CPU_ISA=AVX2): where it has none, every product runs in
// float32.
bool Bf16MatMulAvailable();

// Products of fewer rows stay float32 (the measurement: a one-row bf16 product is 0.68x
// float32 on AMX; a primitive's execute costs more than such a product gains).
inline constexpr int64_t kMinBf16Rows = 4;

}  // namespace loopserve::engine::native
