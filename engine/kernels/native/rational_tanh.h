#pragma once

// tanh(x) ~ x P(x^2) / Q(x^2), degrees 13/6, on x clamped to where float tanh rounds to +-1: the
// approximation of Eigen and ONNX Runtime's MLAS (MlasTanhConstants), a few ulp from std::tanh,
// for the kernels that apply it to a product while it is still in registers (PackedGemv's
// epilogue, the fused LSTM step). Each function carries its own target attribute, so including
// this header in a translation unit built for the baseline ISA is safe: the functions are only
// called behind a run-time ISA check (native::ActiveIsa()).

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace loopserve::engine::native::rational_tanh {

constexpr float kClamp = 7.90531110763549805f;
constexpr float kAlpha13 = -2.76076847742355e-16f;
constexpr float kAlpha11 = 2.00018790482477e-13f;
constexpr float kAlpha9 = -8.60467152213735e-11f;
constexpr float kAlpha7 = 5.12229709037114e-08f;
constexpr float kAlpha5 = 1.48572235717979e-05f;
constexpr float kAlpha3 = 6.37261928875436e-04f;
constexpr float kAlpha1 = 4.89352455891786e-03f;
constexpr float kBeta6 = 1.19825839466702e-06f;
constexpr float kBeta4 = 1.18534705686654e-04f;
constexpr float kBeta2 = 2.26843463243900e-03f;
constexpr float kBeta0 = 4.89352518554385e-03f;

// The bound comes first in max/min, which return their second operand for a NaN: NaN stays NaN,
// as std::tanh keeps it.
__attribute__((target("avx512f,fma"))) inline __m512 Tanh512(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(kClamp), _mm512_max_ps(_mm512_set1_ps(-kClamp), x));
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

// sigmoid(x) = 0.5 + 0.5 tanh(x / 2).
__attribute__((target("avx512f,fma"))) inline __m512 Sigmoid512(__m512 x) {
  const __m512 half = _mm512_set1_ps(0.5f);
  return _mm512_fmadd_ps(Tanh512(_mm512_mul_ps(x, half)), half, half);
}

__attribute__((target("avx2,fma"))) inline __m256 Tanh256(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(kClamp), _mm256_max_ps(_mm256_set1_ps(-kClamp), x));
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

}  // namespace loopserve::engine::native::rational_tanh

#endif
