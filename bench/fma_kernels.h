#pragma once

// The FP32 FMA peak kernels the benchmarks time (lstm_bound_bench, gemm_isa_bench): 12
// independent FMA chains (latency 4 x 2 pipes + slack), `iterations` x 12 FMAs of 16 (zmm) or 8
// (ymm) lanes. Each carries its own target attribute; call Fma512 only where the CPU has AVX-512.

#include <immintrin.h>

namespace loopserve::bench {

inline volatile float g_fma_sink;

__attribute__((target("avx512f,fma"), noinline)) inline void Fma512(long iterations) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.9999f), y = _mm512_set1_ps(0.0001f);
  for (long n = 0; n < iterations; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], x, y);
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  g_fma_sink = out[0];
}

__attribute__((target("avx2,fma"), noinline)) inline void Fma256(long iterations) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.9999f), y = _mm256_set1_ps(0.0001f);
  for (long n = 0; n < iterations; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], x, y);
  }
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  g_fma_sink = out[0];
}

}  // namespace loopserve::bench
