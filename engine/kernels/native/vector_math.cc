#include "engine/kernels/native/vector_math.h"

#include <cmath>

#if defined(LS_VECTOR_MATH_X86)
// GCC 12's AVX-512 min/max intrinsics pass _mm512_undefined_ps() as the unused merge source,
// which -Wmaybe-uninitialized reports once they are inlined (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace loopserve::engine::native {

SimdIsa DetectSimdIsa() {
#if defined(LS_VECTOR_MATH_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SimdIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdIsa::kAvx2;
#endif
  return SimdIsa::kNone;
}

namespace {

SimdIsa Isa() {
  static const SimdIsa isa = DetectSimdIsa();
  return isa;
}

#if defined(LS_VECTOR_MATH_X86)
using vector_math::Sigmoid256;
using vector_math::Sigmoid512;
using vector_math::Tanh256;
using vector_math::Tanh512;

template <bool kSigmoid>
__attribute__((target("avx512f,fma"))) void Apply512(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(x + i, kSigmoid ? Sigmoid512(v) : Tanh512(v));
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + i);
    _mm512_mask_storeu_ps(x + i, mask, kSigmoid ? Sigmoid512(v) : Tanh512(v));
  }
}

template <bool kSigmoid>
__attribute__((target("avx2,fma"))) void Apply256(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(x + i, kSigmoid ? Sigmoid256(v) : Tanh256(v));
  }
  if (i < n) {
    float tail[8] = {};
    for (int64_t k = i; k < n; ++k) tail[k - i] = x[k];
    const __m256 v = _mm256_loadu_ps(tail);
    _mm256_storeu_ps(tail, kSigmoid ? Sigmoid256(v) : Tanh256(v));
    for (int64_t k = i; k < n; ++k) x[k] = tail[k - i];
  }
}
#endif

template <bool kSigmoid>
void Apply(float* x, int64_t n) {
#if defined(LS_VECTOR_MATH_X86)
  switch (Isa()) {
    case SimdIsa::kAvx512:
      return Apply512<kSigmoid>(x, n);
    case SimdIsa::kAvx2:
      return Apply256<kSigmoid>(x, n);
    case SimdIsa::kNone:
      break;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    x[i] = kSigmoid ? 0.5f + 0.5f * std::tanh(0.5f * x[i]) : std::tanh(x[i]);
  }
}

}  // namespace

void TanhInPlace(float* x, int64_t n) { Apply<false>(x, n); }
void SigmoidInPlace(float* x, int64_t n) { Apply<true>(x, n); }

}  // namespace loopserve::engine::native
