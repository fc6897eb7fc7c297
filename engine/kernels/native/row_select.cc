#include "engine/kernels/native/row_select.h"

#include <limits>

#include "engine/kernels/native/cpu_isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge source, which
// -Wmaybe-uninitialized reports once they are inlined (a known false positive; packed_gemv.cc
// has the same pragma).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define LS_ROW_SELECT_X86 1
#endif

namespace loopserve::engine::native {
namespace {

// x ranks strictly before `bound`, or is a NaN.
inline bool Candidate(float x, float bound, bool largest) {
  return largest ? !(x <= bound) : !(x >= bound);
}

int64_t FirstExtremumScalar(const float* x, int64_t n, bool max) {
  float best = x[0];
  for (int64_t j = 0; j < n; ++j) {
    const float v = x[j];
    if (v != v) return -1;
    if (max ? best < v : v < best) best = v;
  }
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] == best) return j;
  }
  return -1;
}

int64_t NextCandidateScalar(const float* x, int64_t from, int64_t n, float bound, bool largest) {
  for (int64_t j = from; j < n; ++j) {
    if (Candidate(x[j], bound, largest)) return j;
  }
  return n;
}

#if defined(LS_ROW_SELECT_X86)

__attribute__((target("avx512f"))) inline __mmask16 TailMask512(int64_t left) {
  return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
}

// Lanes of v that rank strictly before b, or hold a NaN: _CMP_NLE_UQ is not (v <= b), true for
// a NaN; _CMP_NGE_UQ likewise.
__attribute__((target("avx512f"))) inline __mmask16 CandidateMask512(__mmask16 live, __m512 v,
                                                                     __m512 b, bool largest) {
  return largest ? _mm512_mask_cmp_ps_mask(live, v, b, _CMP_NLE_UQ)
                 : _mm512_mask_cmp_ps_mask(live, v, b, _CMP_NGE_UQ);
}

// Two passes: the extreme value (four independent running extremes, NaNs noted on the side),
// then the first element equal to it.
__attribute__((target("avx512f"))) int64_t FirstExtremumAvx512(const float* x, int64_t n,
                                                               bool max) {
  const float fill =
      max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const __m512 fill_v = _mm512_set1_ps(fill);
  __m512 acc[4] = {fill_v, fill_v, fill_v, fill_v};
  __mmask16 nan = 0;
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    for (int t = 0; t < 4; ++t) {
      const __m512 v = _mm512_loadu_ps(x + j + 16 * t);
      nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      acc[t] = max ? _mm512_max_ps(acc[t], v) : _mm512_min_ps(acc[t], v);
    }
  }
  for (; j < n; j += 16) {
    const __m512 v = _mm512_mask_loadu_ps(fill_v, TailMask512(n - j), x + j);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    acc[0] = max ? _mm512_max_ps(acc[0], v) : _mm512_min_ps(acc[0], v);
  }
  if (nan != 0) return -1;
  const __m512 a =
      max ? _mm512_max_ps(_mm512_max_ps(acc[0], acc[1]), _mm512_max_ps(acc[2], acc[3]))
          : _mm512_min_ps(_mm512_min_ps(acc[0], acc[1]), _mm512_min_ps(acc[2], acc[3]));
  const float best = max ? _mm512_reduce_max_ps(a) : _mm512_reduce_min_ps(a);
  const __m512 best_v = _mm512_set1_ps(best);
  for (j = 0; j < n; j += 16) {
    const __mmask16 live = TailMask512(n - j);
    const __mmask16 eq =
        _mm512_mask_cmp_ps_mask(live, _mm512_maskz_loadu_ps(live, x + j), best_v, _CMP_EQ_OQ);
    if (eq != 0) return j + __builtin_ctz(eq);
  }
  return -1;
}

__attribute__((target("avx512f"))) int64_t NextCandidateAvx512(const float* x, int64_t from,
                                                               int64_t n, float bound,
                                                               bool largest) {
  const __m512 b = _mm512_set1_ps(bound);
  int64_t j = from;
  for (; j + 64 <= n; j += 64) {
    const __mmask16 m0 = CandidateMask512(0xFFFF, _mm512_loadu_ps(x + j), b, largest);
    const __mmask16 m1 = CandidateMask512(0xFFFF, _mm512_loadu_ps(x + j + 16), b, largest);
    const __mmask16 m2 = CandidateMask512(0xFFFF, _mm512_loadu_ps(x + j + 32), b, largest);
    const __mmask16 m3 = CandidateMask512(0xFFFF, _mm512_loadu_ps(x + j + 48), b, largest);
    if ((m0 | m1 | m2 | m3) == 0) continue;
    if (m0 != 0) return j + __builtin_ctz(m0);
    if (m1 != 0) return j + 16 + __builtin_ctz(m1);
    if (m2 != 0) return j + 32 + __builtin_ctz(m2);
    return j + 48 + __builtin_ctz(m3);
  }
  for (; j < n; j += 16) {
    const __mmask16 live = TailMask512(n - j);
    const __mmask16 m = CandidateMask512(live, _mm512_maskz_loadu_ps(live, x + j), b, largest);
    if (m != 0) return j + __builtin_ctz(m);
  }
  return n;
}

__attribute__((target("avx2,fma"))) inline int CandidateMask256(__m256 v, __m256 b, bool largest) {
  return largest ? _mm256_movemask_ps(_mm256_cmp_ps(v, b, _CMP_NLE_UQ))
                 : _mm256_movemask_ps(_mm256_cmp_ps(v, b, _CMP_NGE_UQ));
}

__attribute__((target("avx2,fma"))) int64_t FirstExtremumAvx2(const float* x, int64_t n, bool max) {
  const float fill =
      max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const __m256 fill_v = _mm256_set1_ps(fill);
  __m256 acc[4] = {fill_v, fill_v, fill_v, fill_v};
  __m256 nan = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    for (int t = 0; t < 4; ++t) {
      const __m256 v = _mm256_loadu_ps(x + j + 8 * t);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      acc[t] = max ? _mm256_max_ps(acc[t], v) : _mm256_min_ps(acc[t], v);
    }
  }
  if (_mm256_movemask_ps(nan) != 0) return -1;
  const __m256 a =
      max ? _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]))
          : _mm256_min_ps(_mm256_min_ps(acc[0], acc[1]), _mm256_min_ps(acc[2], acc[3]));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, a);
  float best = fill;
  for (float v : lanes) best = max ? (v > best ? v : best) : (v < best ? v : best);
  for (; j < n; ++j) {
    const float v = x[j];
    if (v != v) return -1;
    if (max ? best < v : v < best) best = v;
  }
  const __m256 best_v = _mm256_set1_ps(best);
  for (j = 0; j + 8 <= n; j += 8) {
    const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), best_v, _CMP_EQ_OQ));
    if (eq != 0) return j + __builtin_ctz(static_cast<unsigned>(eq));
  }
  for (; j < n; ++j) {
    if (x[j] == best) return j;
  }
  return -1;
}

__attribute__((target("avx2,fma"))) int64_t NextCandidateAvx2(const float* x, int64_t from,
                                                              int64_t n, float bound,
                                                              bool largest) {
  const __m256 b = _mm256_set1_ps(bound);
  int64_t j = from;
  for (; j + 32 <= n; j += 32) {
    const int m0 = CandidateMask256(_mm256_loadu_ps(x + j), b, largest);
    const int m1 = CandidateMask256(_mm256_loadu_ps(x + j + 8), b, largest);
    const int m2 = CandidateMask256(_mm256_loadu_ps(x + j + 16), b, largest);
    const int m3 = CandidateMask256(_mm256_loadu_ps(x + j + 24), b, largest);
    if ((m0 | m1 | m2 | m3) == 0) continue;
    const uint32_t all = static_cast<uint32_t>(m0) | (static_cast<uint32_t>(m1) << 8) |
                         (static_cast<uint32_t>(m2) << 16) | (static_cast<uint32_t>(m3) << 24);
    return j + __builtin_ctz(all);
  }
  for (; j + 8 <= n; j += 8) {
    const int m = CandidateMask256(_mm256_loadu_ps(x + j), b, largest);
    if (m != 0) return j + __builtin_ctz(static_cast<unsigned>(m));
  }
  return NextCandidateScalar(x, j, n, bound, largest);
}

#endif  // LS_ROW_SELECT_X86

}  // namespace

int64_t FirstExtremumIndexF32(const float* x, int64_t n, bool max) {
#if defined(LS_ROW_SELECT_X86)
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return FirstExtremumAvx512(x, n, max);
    case Isa::kAvx2:
      return FirstExtremumAvx2(x, n, max);
    case Isa::kScalar:
      break;
  }
#endif
  return FirstExtremumScalar(x, n, max);
}

int64_t NextCandidateF32(const float* x, int64_t from, int64_t n, float bound, bool largest) {
#if defined(LS_ROW_SELECT_X86)
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return NextCandidateAvx512(x, from, n, bound, largest);
    case Isa::kAvx2:
      return NextCandidateAvx2(x, from, n, bound, largest);
    case Isa::kScalar:
      break;
  }
#endif
  return NextCandidateScalar(x, from, n, bound, largest);
}

}  // namespace loopserve::engine::native
