// vector_math's AVX2 table. Built with -mavx2 -mfma (engine/kernels/native/CMakeLists.txt);
// vector_math.cc calls it only when ActiveIsa() is kAvx2 or better.

#include <immintrin.h>
#include <sleef.h>

#include "engine/kernels/native/vector_math.h"
#include "engine/kernels/native/vector_math_isa.h"

namespace {

inline __m256 Avx2Abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline __m256 Avx2NanSelect(__m256 a, __m256 b, __m256 r) {
  const __m256 b_nan = _mm256_cmp_ps(b, b, _CMP_UNORD_Q);
  const __m256 a_nan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
  return _mm256_blendv_ps(_mm256_blendv_ps(r, b, b_nan), a, a_nan);
}

// Horizontal op(lane 0, ..., lane 7) of an associative `op` on __m128 (_mm_add_ps, _mm_max_ps,
// ...): halves, then quarters, then pairs; lane 0 holds the result. Max / min / product have no NaN
// handling: callers check for NaN lanes first.
template <typename Op>
inline float Avx2Horizontal(__m256 v, Op op) {
  __m128 s = op(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = op(s, _mm_movehl_ps(s, s));
  s = op(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2 (ln 2 in two parts, Cody-Waite), |r| <=
// ln 2 / 2, e^r by a degree-6 polynomial with the first two coefficients 1 (Horner, six FMAs;
// the others fitted for relative error, 6e-8 on the interval in float arithmetic). 2^n is applied
// as two exponent-field powers 2^(n/2) 2^(n - n/2), so results that are subnormal, zero or infinity
// come out as exactly as from one scaling. Inline, ~20 instructions: SLEEF's expf8_u10avx2 is an
// out-of-line call that emulates what AVX-512 does in one instruction (vscalefps), and ran at 1.7x
// the cost per element of its AVX-512 twin (mamba_b16_d64, perf, Zen 4). NaN stays NaN (the bounds
// come first in max/min).
// e^x = 2^n p for x already clamped to where n fits: returns p = e^r, sets *n.
inline __m256 Avx2ExpReduced(__m256 x, __m256* n) {
  *n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.3814612757e-3f), r, _mm256_set1_ps(8.3687100559e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1668388993e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666521132e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.9999994040e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  return _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
}

inline __m256 Avx2Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
  __m256 n;
  const __m256 p = Avx2ExpReduced(x, &n);
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// tanh as Cephes tanhf computes it: x + x^3 P(x^2) for |x| < 0.625, else sign(x) (1 - 2 / (e^(2|x|)
// + 1)); within 2 ulps of double. Inline, ~35 instructions against SLEEF's
// out-of-line tanhf8_u35avx2, which took 1.3-1.5x its AVX-512 twin's time per element (scan16k,
// rnn_b8_h128). The rational approximation of Eigen and MLAS (rational_tanh.h, half the
// instructions) was tried here and rejected: its errors of up to 5 ulps, carried through six
// steps of an RNN, took loop_cases' loop_input_projection_split past the ONNX tolerance (atol
// 1e-7 on an output of -2.6e-5). NaN stays NaN; +-inf gives +-1.
inline __m256 Avx2Tanh(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 a = Avx2Abs(x);
  const __m256 one = _mm256_set1_ps(1.0f);
  // e^(2|x|) for 2|x| clamped to 20 (float tanh(10) is 1): 2^n with n <= 29 in one scaling.
  __m256 n;
  const __m256 q = Avx2ExpReduced(_mm256_min_ps(_mm256_set1_ps(20.0f), _mm256_add_ps(a, a)), &n);
  const __m256 e =
      _mm256_mul_ps(q, _mm256_castsi256_ps(_mm256_slli_epi32(
                           _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)));
  const __m256 large = _mm256_or_ps(
      sign, _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one))));
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p =
      _mm256_fmadd_ps(_mm256_set1_ps(-5.70498872745e-3f), z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  return _mm256_blendv_ps(small, large, _mm256_cmp_ps(a, _mm256_set1_ps(0.625f), _CMP_GE_OQ));
}

// log1p(e) for e in [0, 1] (NaN passes through), which is all Softplus needs: u = 1 + e in [1, 2],
// log(u) = k ln 2 + log(m) with m = u or u / 2 in [sqrt(1/2), sqrt(2)], log(m) = f - f^2 / 2 +
// f^3 P(f) (f = m - 1 exactly; Cephes logf's degree-8 P), plus (e - (u - 1)) / u for what rounding
// 1 + e lost (for e ~ 1e-5 that is most of the result's digits, so a true division). Inline, ~27
// instructions, no special cases to select; SLEEF's log1pf8_u10avx2 is an out-of-line general
// log1p.
inline __m256 Avx2Log1pUnit(__m256 e) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 u = _mm256_add_ps(one, e);
  const __m256 lost = _mm256_div_ps(_mm256_sub_ps(e, _mm256_sub_ps(u, one)), u);
  const __m256 big = _mm256_cmp_ps(u, _mm256_set1_ps(1.41421356f), _CMP_GT_OQ);
  const __m256 m = _mm256_blendv_ps(u, _mm256_mul_ps(u, _mm256_set1_ps(0.5f)), big);
  const __m256 k = _mm256_and_ps(big, one);
  const __m256 f = _mm256_sub_ps(m, one);
  const __m256 z = _mm256_mul_ps(f, f);
  __m256 p =
      _mm256_fmadd_ps(_mm256_set1_ps(7.0376836292e-2f), f, _mm256_set1_ps(-1.1514610310e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.1676998740e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-1.2420140846e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.4249322787e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-1.6668057665e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.0000714765e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-2.4999993993e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(3.3333331174e-1f));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, f), z);
  y = _mm256_fmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), y);
  y = _mm256_fnmadd_ps(z, _mm256_set1_ps(0.5f), y);
  y = _mm256_add_ps(y, lost);
  return _mm256_fmadd_ps(k, _mm256_set1_ps(0.693359375f), _mm256_add_ps(f, y));
}

}  // namespace

#define LS_V __m256
#define LS_W 8
#define LS_LOAD(p) _mm256_loadu_ps(p)
#define LS_STORE(p, v) _mm256_storeu_ps(p, v)
#define LS_SET1(x) _mm256_set1_ps(x)
#define LS_ADD(a, b) _mm256_add_ps(a, b)
#define LS_SUB(a, b) _mm256_sub_ps(a, b)
#define LS_MUL(a, b) _mm256_mul_ps(a, b)
#define LS_DIV(a, b) _mm256_div_ps(a, b)
#define LS_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define LS_MAX(a, b) _mm256_max_ps(a, b)
#define LS_MIN(a, b) _mm256_min_ps(a, b)
#define LS_SQRT(v) _mm256_sqrt_ps(v)
#define LS_ABS(v) Avx2Abs(v)
#define LS_GE0_SELECT(x, a, b) \
  _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ))
#define LS_NAN_SELECT(a, b, r) Avx2NanSelect(a, b, r)
#define LS_FLOOR(v) _mm256_round_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define LS_CEIL(v) _mm256_round_ps(v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)
#define LS_ROUND(v) _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define LS_HSUM(v) Avx2Horizontal(v, [](__m128 a, __m128 b) { return _mm_add_ps(a, b); })
#define LS_HMAX(v) Avx2Horizontal(v, [](__m128 a, __m128 b) { return _mm_max_ps(a, b); })
#define LS_HMIN(v) Avx2Horizontal(v, [](__m128 a, __m128 b) { return _mm_min_ps(a, b); })
#define LS_HMUL(v) Avx2Horizontal(v, [](__m128 a, __m128 b) { return _mm_mul_ps(a, b); })
#define LS_TANH(v) Avx2Tanh(v)
#define LS_EXP(v) Avx2Exp(v)
#define LS_EXPM1(v) Sleef_expm1f8_u10avx2(v)
#define LS_LOG(v) Sleef_logf8_u10avx2(v)
#define LS_LOG1P(v) Sleef_log1pf8_u10avx2(v)
#define LS_LOG1P_UNIT(v) Avx2Log1pUnit(v)
#define LS_SIN(v) Sleef_sinf8_u35avx2(v)
#define LS_COS(v) Sleef_cosf8_u35avx2(v)
#define LS_POW(a, b) Sleef_powf8_u10avx2(a, b)
#define LS_TAN(v) Sleef_tanf8_u10avx2(v)
#define LS_ASIN(v) Sleef_asinf8_u10avx2(v)
#define LS_ACOS(v) Sleef_acosf8_u10avx2(v)
#define LS_ATAN(v) Sleef_atanf8_u10avx2(v)
#define LS_SINH(v) Sleef_sinhf8_u10avx2(v)
#define LS_COSH(v) Sleef_coshf8_u10avx2(v)
#define LS_ASINH(v) Sleef_asinhf8_u10avx2(v)
#define LS_ACOSH(v) Sleef_acoshf8_u10avx2(v)
#define LS_ATANH(v) Sleef_atanhf8_u10avx2(v)
#define LS_TABLE kAvx2Table

#include "engine/kernels/native/vector_math_impl.inc"
