// What one core can do at best for the LSTM benchmark (bench/RESULTS.md, "LSTM layer"): its
// float32 FMA peak and the rate at which it reads a weight matrix again and again, from which the
// floors of the benchmark's layer follow. Times are the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), so time the OS gives to other processes on a shared machine does not
// count; medians of 9.
//
//   build/bin/lstm_bound_bench [hidden=256] [input=256] [steps=64]
//   build/bin/lstm_bound_bench --peak   (only the FMA peaks, zmm if the CPU has AVX-512 and ymm,
//                                        and the re-read rates of buffers of 16 KB to 8 MB with
//                                        eight independent sums; bench/roofline.py reads them)
//
// Floors printed, for batch 1 and 16:
// - compute: 2 B T 4H (I + H) flops (the input projection and the recurrent products) at the FMA
//   peak;
// - batch 1: each step reads the whole recurrent weight R (4H x H float32) once, at the measured
//   rate of re-reading a buffer of R's size with the sweep direction alternating per pass (what
//   the fused LSTM step does), plus the projection at the FMA peak (it cannot overlap the reads
//   on one core: the projection of a step needs W, another matrix of R's size).

#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/fma_kernels.h"

namespace {

using loopserve::bench::Fma256;
using loopserve::bench::Fma512;

double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

template <typename F>
double Median(F&& f) {
  std::vector<double> times;
  for (int i = 0; i < 9; ++i) {
    const double start = ThreadSeconds();
    f();
    times.push_back(ThreadSeconds() - start);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

volatile float g_sink;

// One pass over `n` floats in blocks of 64 KB, first block to last or last to first.
__attribute__((target("avx2"), noinline)) void ReadPass(const float* buffer, long n,
                                                        bool backward) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  constexpr long kBlock = 16384;
  const long blocks = n / kBlock;
  for (long i = 0; i < blocks; ++i) {
    const float* p = buffer + (backward ? blocks - 1 - i : i) * kBlock;
    for (long j = 0; j < kBlock; j += 32) {
      a0 = _mm256_add_ps(a0, _mm256_load_ps(p + j));
      a1 = _mm256_add_ps(a1, _mm256_load_ps(p + j + 8));
      a2 = _mm256_add_ps(a2, _mm256_load_ps(p + j + 16));
      a3 = _mm256_add_ps(a3, _mm256_load_ps(p + j + 24));
    }
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  g_sink = out[0];
}

// One pass over `n` floats (a multiple of 128), eight independent sums: the read rate of the cache
// level holding the buffer, not of an add chain.
__attribute__((target("avx512f"), noinline)) void ReadPass512(const float* p, long n) {
  __m512 a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm512_setzero_ps();
  for (long j = 0; j < n; j += 128) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) a[i] = _mm512_add_ps(a[i], _mm512_load_ps(p + j + 16 * i));
  }
  for (int i = 1; i < 8; ++i) a[0] = _mm512_add_ps(a[0], a[i]);
  float out[16];
  _mm512_storeu_ps(out, a[0]);
  g_sink = out[0];
}

__attribute__((target("avx2"), noinline)) void ReadPass256(const float* p, long n) {
  __m256 a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
  for (long j = 0; j < n; j += 64) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) a[i] = _mm256_add_ps(a[i], _mm256_load_ps(p + j + 8 * i));
  }
  for (int i = 1; i < 8; ++i) a[0] = _mm256_add_ps(a[0], a[i]);
  float out[8];
  _mm256_storeu_ps(out, a[0]);
  g_sink = out[0];
}

// Bytes per second of re-reading a buffer of `kb` KB with the widest loads the CPU has.
double ReReadRate(long kb) {
  const long n = kb * 256;
  float* buffer = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4));
  for (long i = 0; i < n; ++i) buffer[i] = 1e-6f * static_cast<float>(i % 7);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const long passes = std::max(10L, 20000 / kb);
  auto pass = [&] {
    for (long p = 0; p < passes; ++p) avx512 ? ReadPass512(buffer, n) : ReadPass256(buffer, n);
  };
  pass();
  const double t = Median(pass);
  std::free(buffer);
  return static_cast<double>(kb) * 1024 * static_cast<double>(passes) / t;
}

// Seconds per pass of re-reading `bytes` (rounded to 64 KB blocks).
double ReadSeconds(long bytes, bool alternate) {
  const long n = std::max(1L, bytes / 65536) * 16384;
  float* buffer = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4));
  for (long i = 0; i < n; ++i) buffer[i] = 1e-6f * static_cast<float>(i % 7);
  constexpr int kPasses = 100;
  for (int p = 0; p < 20; ++p) ReadPass(buffer, n, alternate && (p & 1));
  const double t = Median([&] {
    for (int p = 0; p < kPasses; ++p) ReadPass(buffer, n, alternate && (p & 1));
  });
  std::free(buffer);
  return t / kPasses;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr long kIterations = 20000000;
  if (argc == 2 && std::strcmp(argv[1], "--peak") == 0) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
      std::fprintf(stderr, "needs AVX2 + FMA\n");
      return 1;
    }
    if (__builtin_cpu_supports("avx512f")) {
      const double t = Median([] { Fma512(kIterations); });
      std::printf("FMA peak (zmm): %.1f GFLOP/s\n",
                  static_cast<double>(kIterations) * 12 * 32 / t / 1e9);
    }
    const double t = Median([] { Fma256(kIterations); });
    std::printf("FMA peak (ymm): %.1f GFLOP/s\n",
                static_cast<double>(kIterations) * 12 * 16 / t / 1e9);
    for (long kb : {16L, 64L, 256L, 512L, 1024L, 2048L, 8192L}) {
      std::printf("re-read %ld KB: %.1f GB/s\n", kb, ReReadRate(kb) / 1e9);
    }
    return 0;
  }
  const long h = argc > 1 ? std::atol(argv[1]) : 256;
  const long in = argc > 2 ? std::atol(argv[2]) : 256;
  const long steps = argc > 3 ? std::atol(argv[3]) : 64;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || h <= 0 || in <= 0 ||
      steps <= 0) {
    std::fprintf(stderr, "needs AVX2 + FMA and positive sizes\n");
    return 1;
  }
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const double fma_time =
      avx512 ? Median([] { Fma512(kIterations); }) : Median([] { Fma256(kIterations); });
  const double peak = static_cast<double>(kIterations) * 12 * (avx512 ? 32 : 16) / fma_time;
  std::printf("FMA peak (%s): %.1f GFLOP/s\n", avx512 ? "zmm" : "ymm", peak / 1e9);

  const long r_bytes = 4 * h * h * 4;
  std::printf("re-reading a buffer (GB/s, us per pass):\n");
  for (const long kb : {256L, 512L, r_bytes / 1024, 2 * r_bytes / 1024, 8192L}) {
    for (const bool alternate : {false, true}) {
      const double t = ReadSeconds(kb * 1024, alternate);
      std::printf("  %6ld KB %-11s %6.1f GB/s %8.2f us\n", kb,
                  alternate ? "alternating" : "forward", static_cast<double>(kb) * 1024 / t / 1e9,
                  t * 1e6);
    }
  }
  const double r_read = ReadSeconds(r_bytes, true);
  for (const long batch : {1L, 16L}) {
    const double projection = 2.0 * batch * steps * 4 * h * in;
    const double recurrent = 2.0 * batch * steps * 4 * h * h;
    std::printf("hidden %ld input %ld steps %ld batch %ld: %.3f GFLOP, compute floor %.3f ms", h,
                in, steps, batch, (projection + recurrent) / 1e9,
                (projection + recurrent) / peak * 1e3);
    if (batch == 1) {
      std::printf(
          "; R (%ld KB) read per step: %.2f us -> floor %.3f ms (reads) + %.3f ms "
          "(projection) = %.3f ms",
          r_bytes / 1024, r_read * 1e6, steps * r_read * 1e3, projection / peak * 1e3,
          (steps * r_read + projection / peak) * 1e3);
    }
    std::printf("\n");
  }
  return 0;
}
