#pragma once

// Internal to vector_math: the per-ISA function tables. vector_math_avx512.cc and
// vector_math_avx2.cc are compiled with -mavx512f / -mavx2 (and -mfma) and define one table each;
// vector_math.cc picks one by ActiveIsa() and calls it only on a CPU that has the ISA. This header
// must stay free of inline functions: an inline function compiled in an AVX-512 translation unit
// could be the copy the linker keeps for every caller.

#include <cstdint>

namespace loopserve::engine::native::vecmath {

struct Table {
  void (*unary)(int op, const float* x, float* y, int64_t n, float alpha, float beta);
  void (*binary)(int op, const float* a, int64_t a_stride, const float* b, int64_t b_stride,
                 float* y, int64_t n);
  float (*sum)(const float* x, int64_t n);
  float (*max)(const float* x, int64_t n);
  float (*exp_shift_sum)(const float* x, float shift, float* y, int64_t n);
};

extern const Table kAvx512Table;
extern const Table kAvx2Table;

}  // namespace loopserve::engine::native::vecmath
