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

inline float Avx2HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
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
#define LS_HSUM(v) Avx2HorizontalSum(v)
#define LS_TANH(v) Sleef_tanhf8_u35avx2(v)
#define LS_EXP(v) Sleef_expf8_u10avx2(v)
#define LS_EXPM1(v) Sleef_expm1f8_u10avx2(v)
#define LS_LOG(v) Sleef_logf8_u10avx2(v)
#define LS_LOG1P(v) Sleef_log1pf8_u10avx2(v)
#define LS_ERF(v) Sleef_erff8_u10avx2(v)
#define LS_SIN(v) Sleef_sinf8_u35avx2(v)
#define LS_COS(v) Sleef_cosf8_u35avx2(v)
#define LS_POW(a, b) Sleef_powf8_u10avx2(a, b)
#define LS_TABLE kAvx2Table

#include "engine/kernels/native/vector_math_impl.inc"
