#pragma once

// Vectorised float32 math over arrays: the transcendental and arithmetic elementwise functions
// that loop bodies apply to small tensors (an RNN cell's [1, 128] Tanh, a gate's Sigmoid, a
// selective scan's Exp and Softplus, erf-GELU), where a oneDNN primitive's fixed cost per execute
// (0.2-0.6 us) exceeds the arithmetic and a scalar libm loop (15-20 ns an element in double) is
// slower still. The functions come from SLEEF (Debian libsleef-dev: Sleef_*f16_*avx512f /
// Sleef_*f8_*avx2, 1.0-3.5 ulp), except on AVX2 exp, tanh and erf, which are inline code of ours
// (vector_math_avx2.cc: SLEEF's AVX2 versions emulate AVX-512 instructions and cost 1.3-1.7x their
// AVX-512 twins per element; ours are within 1, 5 and 6 ulps). They are called from translation
// units built for each ISA and chosen at run time by native::ActiveIsa(); a scalar float loop
// serves CPUs without AVX2. Stateless and thread-safe. Accuracy is tested against double precision
// (tests/unit/engine/kernels/native/ vector_math_test.cc); every function is within the ONNX
// backend tolerance (rtol 1e-3).

#include <cstdint>

#include "engine/ir/eltwise_fn.h"

namespace loopserve::engine::native {

// Elementwise y = f(x) and y = a op b: the rows of engine/ir/eltwise_fn.h (the one table of
// elementwise functions; its scalar expressions define each op). `alpha` / `beta` parameterise
// the functions that say so.
using VecUnary = EltwiseFn;
using VecBinary = ArithOp;

// y[i] = op(x[i]) for i < n. `y` may be `x` (in place).
void UnaryF32(VecUnary op, const float* x, float* y, int64_t n, float alpha = 0.0f,
              float beta = 0.0f);

// y[i] = a[i * a_stride] op b[i * b_stride] for i < n; strides are 0 (a scalar operand) or 1.
// `y` may be `a` or `b`. Max and Min return NaN when either operand is NaN (numpy's rule).
void BinaryF32(VecBinary op, const float* a, int64_t a_stride, const float* b, int64_t b_stride,
               float* y, int64_t n);

// Row reductions (ReduceRowsF32). Max and Min return NaN when the row has one (numpy's rule).
enum class VecReduce : uint8_t { kSum, kMax, kMin, kProd, kSumAbs, kSumSquare, kCount };

// y[r] = reduce(x[r * n], ..., x[r * n + n - 1]) for r < rows: `rows` contiguous rows of n >= 1
// in one call (a Reduce* over a short last axis: no per-row dispatch).
void ReduceRowsF32(VecReduce op, const float* x, int64_t rows, int64_t n, float* y);

// Reductions of one contiguous row.
float SumF32(const float* x, int64_t n);
float MaxF32(const float* x, int64_t n);

// sum x[i] y[i], and y[i] += a x[i].
float DotF32(const float* x, const float* y, int64_t n);
void AxpyF32(float a, const float* x, float* y, int64_t n);

// y[j] = sum_kk x[kk] b[kk * ldb + j] for j < n: a row vector times a [k, n] matrix with row
// stride ldb (accumulators in registers across k; y is written once).
void VecMatF32(const float* x, const float* b, int64_t ldb, int64_t k, int64_t n, float* y);
// y[r] = sum_kk x[kk] b[r * k + kk] for r < n: x against n contiguous rows of b.
void RowDotsF32(const float* x, const float* b, int64_t k, int64_t n, float* y);

// y[i] = exp(x[i] - shift), returning the sum of the y[i] (a softmax's numerator and denominator
// in one pass). `y` may be `x`.
float ExpShiftSumF32(const float* x, float shift, float* y, int64_t n);

}  // namespace loopserve::engine::native
