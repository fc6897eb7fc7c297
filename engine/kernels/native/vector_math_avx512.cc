// vector_math's AVX-512 table. Built with -mavx512f -mfma (engine/kernels/native/CMakeLists.txt);
// vector_math.cc calls it only when ActiveIsa() is kAvx512.

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge source, which
// -W(maybe-)uninitialized reports once they are inlined (a known false positive; packed_gemv.cc
// has the same pragma).
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (an error under -Werror)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <sleef.h>

#include "engine/kernels/native/vector_math.h"
#include "engine/kernels/native/vector_math_isa.h"

#define LS_V __m512
#define LS_W 16
#define LS_LOAD(p) _mm512_loadu_ps(p)
#define LS_STORE(p, v) _mm512_storeu_ps(p, v)
#define LS_SET1(x) _mm512_set1_ps(x)
#define LS_ADD(a, b) _mm512_add_ps(a, b)
#define LS_SUB(a, b) _mm512_sub_ps(a, b)
#define LS_MUL(a, b) _mm512_mul_ps(a, b)
#define LS_DIV(a, b) _mm512_div_ps(a, b)
#define LS_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define LS_MAX(a, b) _mm512_max_ps(a, b)
#define LS_MIN(a, b) _mm512_min_ps(a, b)
#define LS_SQRT(v) _mm512_sqrt_ps(v)
#define LS_ABS(v) _mm512_abs_ps(v)
#define LS_GE0_SELECT(x, a, b) \
  _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), b, a)
#define LS_NAN_SELECT(a, b, r)                                 \
  _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), \
                       _mm512_mask_blend_ps(_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), r, b), a)
#define LS_FLOOR(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define LS_CEIL(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)
#define LS_ROUND(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define LS_HSUM(v) _mm512_reduce_add_ps(v)
#define LS_HMAX(v) _mm512_reduce_max_ps(v)
#define LS_HMIN(v) _mm512_reduce_min_ps(v)
#define LS_HMUL(v) _mm512_reduce_mul_ps(v)
#define LS_TANH(v) Sleef_tanhf16_u35avx512f(v)
#define LS_EXP(v) Sleef_expf16_u10avx512f(v)
#define LS_EXPM1(v) Sleef_expm1f16_u10avx512f(v)
#define LS_LOG(v) Sleef_logf16_u10avx512f(v)
#define LS_LOG1P(v) Sleef_log1pf16_u10avx512f(v)
#define LS_SIN(v) Sleef_sinf16_u35avx512f(v)
#define LS_COS(v) Sleef_cosf16_u35avx512f(v)
#define LS_POW(a, b) Sleef_powf16_u10avx512f(a, b)
#define LS_TAN(v) Sleef_tanf16_u10avx512f(v)
#define LS_ASIN(v) Sleef_asinf16_u10avx512f(v)
#define LS_ACOS(v) Sleef_acosf16_u10avx512f(v)
#define LS_ATAN(v) Sleef_atanf16_u10avx512f(v)
#define LS_SINH(v) Sleef_sinhf16_u10avx512f(v)
#define LS_COSH(v) Sleef_coshf16_u10avx512f(v)
#define LS_ASINH(v) Sleef_asinhf16_u10avx512f(v)
#define LS_ACOSH(v) Sleef_acoshf16_u10avx512f(v)
#define LS_ATANH(v) Sleef_atanhf16_u10avx512f(v)
#define LS_TABLE kAvx512Table

#include "engine/kernels/native/vector_math_impl.inc"
