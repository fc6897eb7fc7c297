#pragma once

// Internal to vector_math: the per-ISA function tables. vector_math_avx512.cc and
// vector_math_avx2.cc are compiled with -mavx512f / -mavx2 (and -mfma) and define one table each;
// vector_math.cc picks one by ActiveIsa() and calls it only on a CPU that has the ISA. This header
// must stay free of inline functions: an inline function compiled in an AVX-512 translation unit
// could be the copy the linker keeps for every caller.

#include <cstdint>

namespace loopserve::engine::native::vecmath {

// One step of a register-fused elementwise chain (see ElementwiseChain): kind 0 = unary `op`
// (a VecUnary), kind 1 = binary `op` (a VecBinary) with operand `operand`, on the left of the value
// when `operand_first`.
struct ChainOp {
  uint8_t kind;
  uint8_t op;
  uint8_t operand;
  uint8_t operand_first;
  float alpha;
  float beta;
};

struct Table {
  void (*unary)(int op, const float* x, float* y, int64_t n, float alpha, float beta);
  void (*binary)(int op, const float* a, int64_t a_stride, const float* b, int64_t b_stride,
                 float* y, int64_t n);
  float (*sum)(const float* x, int64_t n);
  float (*max)(const float* x, int64_t n);
  float (*exp_shift_sum)(const float* x, float shift, float* y, int64_t n);
  // y[i] = chain(rows[0][i * strides[0]], ...) for i < n: each vector of y is loaded from operand
  // 0 once, taken through every op in registers and stored once. strides are 0 or 1.
  void (*chain_row)(const ChainOp* ops, int num_ops, const float* const* rows,
                    const int64_t* strides, float* y, int64_t n);
  // chain_row over `count` rows of n: row r reads operand i from rows[i] + r * row_strides[i]
  // (num_operands of them, at most 8) and writes y + r * n. One call for a block of short rows
  // (a selective scan's [B, D, 16] state) instead of one per row.
  void (*chain_rows)(const ChainOp* ops, int num_ops, const float* const* rows,
                     const int64_t* strides, const int64_t* row_strides, int num_operands, float* y,
                     int64_t n, int64_t count);
  float (*dot)(const float* x, const float* y, int64_t n);
  // y[i] += a * x[i]
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  // y[j] = sum_kk x[kk] * b[kk * ldb + j] for j < n (a row vector times a [k, n] matrix).
  void (*vec_mat)(const float* x, const float* b, int64_t ldb, int64_t k, int64_t n, float* y);
  // y[r] = sum_kk x[kk] * b[r * k + kk] for r < n (the dot products of x with n rows of b).
  void (*row_dots)(const float* x, const float* b, int64_t k, int64_t n, float* y);
  // y[r] = reduce(row r) for `rows` contiguous rows of n >= 1; op a VecReduce.
  void (*reduce_rows)(int op, const float* x, int64_t rows, int64_t n, float* y);
};

// The table of the active ISA, or null on CPUs without AVX2 (vector_math.cc).
const Table* ActiveTable();

extern const Table kAvx512Table;
extern const Table kAvx2Table;

}  // namespace loopserve::engine::native::vecmath
