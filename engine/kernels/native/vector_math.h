#pragma once

// Vectorised float math shared by the native kernels: tanh as the rational approximation of
// Eigen and ONNX Runtime's MLAS (a few ulp from std::tanh), sigmoid as 0.5 + 0.5 tanh(x / 2).
// The per-register forms are inline with target attributes so callers compiled for the baseline
// ISA can use them inside their own AVX-512 / AVX2 functions; the array forms pick the widest ISA
// the CPU has at run time (scalar std::tanh elsewhere).

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LS_VECTOR_MATH_X86 1
#endif

namespace loopserve::engine::native {

enum class SimdIsa : uint8_t { kNone, kAvx2, kAvx512 };

// AVX-512F, else AVX2+FMA, else none (libgcc's checks include the OS's XSAVE support).
SimdIsa DetectSimdIsa();

// x[0:n] = tanh(x) / sigmoid(x), in place.
void TanhInPlace(float* x, int64_t n);
void SigmoidInPlace(float* x, int64_t n);

#if defined(LS_VECTOR_MATH_X86)
namespace vector_math {

// tanh(x) ~ x P(x^2) / Q(x^2), degrees 13/6, on x clamped to where float tanh rounds to +-1.
inline constexpr float kTanhClamp = 7.90531110763549805f;
inline constexpr float kAlpha13 = -2.76076847742355e-16f;
inline constexpr float kAlpha11 = 2.00018790482477e-13f;
inline constexpr float kAlpha9 = -8.60467152213735e-11f;
inline constexpr float kAlpha7 = 5.12229709037114e-08f;
inline constexpr float kAlpha5 = 1.48572235717979e-05f;
inline constexpr float kAlpha3 = 6.37261928875436e-04f;
inline constexpr float kAlpha1 = 4.89352455891786e-03f;
inline constexpr float kBeta6 = 1.19825839466702e-06f;
inline constexpr float kBeta4 = 1.18534705686654e-04f;
inline constexpr float kBeta2 = 2.26843463243900e-03f;
inline constexpr float kBeta0 = 4.89352518554385e-03f;

__attribute__((target("avx512f,fma"))) inline __m512 Tanh512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-kTanhClamp)), _mm512_set1_ps(kTanhClamp));
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_fmadd_ps(x2, _mm512_set1_ps(kAlpha13), _mm512_set1_ps(kAlpha11));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kAlpha9));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kAlpha7));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kAlpha5));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kAlpha3));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kAlpha1));
  p = _mm512_mul_ps(p, x);
  __m512 q = _mm512_fmadd_ps(x2, _mm512_set1_ps(kBeta6), _mm512_set1_ps(kBeta4));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(kBeta2));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(kBeta0));
  return _mm512_div_ps(p, q);
}

__attribute__((target("avx512f,fma"))) inline __m512 Sigmoid512(__m512 x) {
  const __m512 half = _mm512_set1_ps(0.5f);
  return _mm512_fmadd_ps(Tanh512(_mm512_mul_ps(x, half)), half, half);
}

__attribute__((target("avx2,fma"))) inline __m256 Tanh256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-kTanhClamp)), _mm256_set1_ps(kTanhClamp));
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_fmadd_ps(x2, _mm256_set1_ps(kAlpha13), _mm256_set1_ps(kAlpha11));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kAlpha9));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kAlpha7));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kAlpha5));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kAlpha3));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(kAlpha1));
  p = _mm256_mul_ps(p, x);
  __m256 q = _mm256_fmadd_ps(x2, _mm256_set1_ps(kBeta6), _mm256_set1_ps(kBeta4));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(kBeta2));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(kBeta0));
  return _mm256_div_ps(p, q);
}

__attribute__((target("avx2,fma"))) inline __m256 Sigmoid256(__m256 x) {
  const __m256 half = _mm256_set1_ps(0.5f);
  return _mm256_fmadd_ps(Tanh256(_mm256_mul_ps(x, half)), half, half);
}

}  // namespace vector_math
#endif  // LS_VECTOR_MATH_X86

}  // namespace loopserve::engine::native
