#include "engine/kernels/native/vector_math.h"

#include <cmath>

#include "engine/kernels/backend.h"
#include "engine/kernels/native/vector_math_isa.h"

namespace loopserve::engine::native {

namespace vecmath {

const Table* ActiveTable() {
  switch (ActiveBackend().vector_isa) {
    case Isa::kAvx512:
      return &kAvx512Table;
    case Isa::kAvx2:
      return &kAvx2Table;
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

}  // namespace vecmath

namespace {

// The scalar fallback for CPUs without AVX2: the table's definition of each op.
float ScalarUnary(VecUnary op, float x, float alpha, float beta) {
  return EltwiseScalar<float>(op, x, alpha, beta);
}

float ScalarBinary(VecBinary op, float a, float b) { return ArithScalar<float>(op, a, b); }

}  // namespace

void UnaryF32(VecUnary op, const float* x, float* y, int64_t n, float alpha, float beta) {
  if (n <= 0) return;
  if (const vecmath::Table* table = vecmath::ActiveTable()) {
    table->unary(static_cast<int>(op), x, y, n, alpha, beta);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = ScalarUnary(op, x[i], alpha, beta);
}

void BinaryF32(VecBinary op, const float* a, int64_t a_stride, const float* b, int64_t b_stride,
               float* y, int64_t n) {
  if (n <= 0) return;
  if (const vecmath::Table* table = vecmath::ActiveTable()) {
    table->binary(static_cast<int>(op), a, a_stride, b, b_stride, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = ScalarBinary(op, a[i * a_stride], b[i * b_stride]);
}

float SumF32(const float* x, int64_t n) {
  if (n <= 0) return 0.0f;
  if (const vecmath::Table* table = vecmath::ActiveTable()) return table->sum(x, n);
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}

void ReduceRowsF32(VecReduce op, const float* x, int64_t rows, int64_t n, float* y) {
  if (rows <= 0 || n <= 0) return;
  if (const vecmath::Table* table = vecmath::ActiveTable()) {
    table->reduce_rows(static_cast<int>(op), x, rows, n, y);
    return;
  }
  for (int64_t r = 0; r < rows; ++r, x += n) {
    float acc = x[0];
    if (op == VecReduce::kSumAbs) acc = std::fabs(acc);
    if (op == VecReduce::kSumSquare) acc = acc * acc;
    for (int64_t i = 1; i < n; ++i) {
      const float v = x[i];
      switch (op) {
        case VecReduce::kMax:
          acc = std::isnan(acc) ? acc : std::isnan(v) ? v : (acc < v ? v : acc);
          break;
        case VecReduce::kMin:
          acc = std::isnan(acc) ? acc : std::isnan(v) ? v : (v < acc ? v : acc);
          break;
        case VecReduce::kProd:
          acc *= v;
          break;
        case VecReduce::kSumAbs:
          acc += std::fabs(v);
          break;
        case VecReduce::kSumSquare:
          acc += v * v;
          break;
        default:
          acc += v;
          break;
      }
    }
    y[r] = acc;
  }
}

float MaxF32(const float* x, int64_t n) {
  if (n <= 0) return -INFINITY;
  if (const vecmath::Table* table = vecmath::ActiveTable()) return table->max(x, n);
  float best = x[0];
  for (int64_t i = 1; i < n && !std::isnan(best); ++i) {
    if (std::isnan(x[i]) || x[i] > best) best = x[i];
  }
  return best;
}

float ExpShiftSumF32(const float* x, float shift, float* y, int64_t n) {
  if (n <= 0) return 0.0f;
  if (const vecmath::Table* table = vecmath::ActiveTable())
    return table->exp_shift_sum(x, shift, y, n);
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    total += y[i];
  }
  return total;
}

float DotF32(const float* x, const float* y, int64_t n) {
  if (n <= 0) return 0.0f;
  if (const vecmath::Table* table = vecmath::ActiveTable()) return table->dot(x, y, n);
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) total += x[i] * y[i];
  return total;
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  if (const vecmath::Table* table = vecmath::ActiveTable()) {
    table->axpy(a, x, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void VecMatF32(const float* x, const float* b, int64_t ldb, int64_t k, int64_t n, float* y) {
  if (n <= 0) return;
  if (const vecmath::Table* table = vecmath::ActiveTable()) {
    table->vec_mat(x, b, ldb, k, n, y);
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    float total = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) total += x[kk] * b[kk * ldb + j];
    y[j] = total;
  }
}

void RowDotsF32(const float* x, const float* b, int64_t k, int64_t n, float* y) {
  if (n <= 0) return;
  if (const vecmath::Table* table = vecmath::ActiveTable()) {
    table->row_dots(x, b, k, n, y);
    return;
  }
  for (int64_t r = 0; r < n; ++r) {
    float total = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) total += x[kk] * b[r * k + kk];
    y[r] = total;
  }
}

}  // namespace loopserve::engine::native
