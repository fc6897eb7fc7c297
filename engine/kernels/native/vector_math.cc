#include "engine/kernels/native/vector_math.h"

#include <cmath>

#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/vector_math_isa.h"

namespace loopserve::engine::native {

namespace vecmath {

const Table* ActiveTable() {
  switch (ActiveIsa()) {
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

const vecmath::Table* Vectorised() {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return &vecmath::kAvx512Table;
    case Isa::kAvx2:
      return &vecmath::kAvx2Table;
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

// The scalar fallback for CPUs without AVX2 (and the definition of each op).
float ScalarUnary(VecUnary op, float x, float alpha, float beta) {
  switch (op) {
    case VecUnary::kIdentity:
      return x;
    case VecUnary::kRelu:
      return x < 0.0f ? 0.0f : x;
    case VecUnary::kTanh:
      return std::tanh(x);
    case VecUnary::kSigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case VecUnary::kExp:
      return std::exp(x);
    case VecUnary::kLog:
      return std::log(x);
    case VecUnary::kSqrt:
      return std::sqrt(x);
    case VecUnary::kAbs:
      return std::fabs(x);
    case VecUnary::kNeg:
      return -x;
    case VecUnary::kErf:
      return std::erf(x);
    case VecUnary::kSoftplus:
      return std::fmax(x, 0.0f) + std::log1p(std::exp(-std::fabs(x)));
    case VecUnary::kGeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case VecUnary::kGeluTanh:
      return 0.5f * x * (1.0f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case VecUnary::kSin:
      return std::sin(x);
    case VecUnary::kCos:
      return std::cos(x);
    case VecUnary::kReciprocal:
      return 1.0f / x;
    case VecUnary::kLinear:
      return alpha * x + beta;
    case VecUnary::kPow:
      return std::pow(x, alpha);
    case VecUnary::kLeakyRelu:
      return x >= 0.0f ? x : alpha * x;
    case VecUnary::kElu:
      return x >= 0.0f ? x : alpha * std::expm1(x);
    case VecUnary::kHardSigmoid:
      return std::fmin(1.0f, std::fmax(0.0f, alpha * x + beta));
    case VecUnary::kHardSwish:
      return x * std::fmin(1.0f, std::fmax(0.0f, x / 6.0f + 0.5f));
    case VecUnary::kSoftsign:
      return x / (1.0f + std::fabs(x));
    case VecUnary::kClip: {
      if (std::isnan(x)) return x;
      const float lo = x < alpha ? alpha : x;
      return beta < lo ? beta : lo;
    }
    case VecUnary::kFloor:
      return std::floor(x);
    case VecUnary::kCeil:
      return std::ceil(x);
    case VecUnary::kRound:
      return std::nearbyint(x);
    case VecUnary::kMish:
      return x * std::tanh(std::fmax(x, 0.0f) + std::log1p(std::exp(-std::fabs(x))));
    case VecUnary::kTan:
      return std::tan(x);
    case VecUnary::kAsin:
      return std::asin(x);
    case VecUnary::kAcos:
      return std::acos(x);
    case VecUnary::kAtan:
      return std::atan(x);
    case VecUnary::kCount:
      break;
  }
  return x;
}

float ScalarBinary(VecBinary op, float a, float b) {
  switch (op) {
    case VecBinary::kAdd:
      return a + b;
    case VecBinary::kSub:
      return a - b;
    case VecBinary::kMul:
      return a * b;
    case VecBinary::kDiv:
      return a / b;
    case VecBinary::kMax:
      return std::isnan(a) ? a : std::isnan(b) ? b : (a < b ? b : a);
    case VecBinary::kMin:
      return std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a);
    case VecBinary::kPow:
      return std::pow(a, b);
    case VecBinary::kPRelu:
      return a >= 0.0f ? a : a * b;
    case VecBinary::kCount:
      break;
  }
  return a;
}

}  // namespace

void UnaryF32(VecUnary op, const float* x, float* y, int64_t n, float alpha, float beta) {
  if (n <= 0) return;
  if (const vecmath::Table* table = Vectorised()) {
    table->unary(static_cast<int>(op), x, y, n, alpha, beta);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = ScalarUnary(op, x[i], alpha, beta);
}

void BinaryF32(VecBinary op, const float* a, int64_t a_stride, const float* b, int64_t b_stride,
               float* y, int64_t n) {
  if (n <= 0) return;
  if (const vecmath::Table* table = Vectorised()) {
    table->binary(static_cast<int>(op), a, a_stride, b, b_stride, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = ScalarBinary(op, a[i * a_stride], b[i * b_stride]);
}

float SumF32(const float* x, int64_t n) {
  if (n <= 0) return 0.0f;
  if (const vecmath::Table* table = Vectorised()) return table->sum(x, n);
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}

void ReduceRowsF32(VecReduce op, const float* x, int64_t rows, int64_t n, float* y) {
  if (rows <= 0 || n <= 0) return;
  if (const vecmath::Table* table = Vectorised()) {
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
  if (const vecmath::Table* table = Vectorised()) return table->max(x, n);
  float best = x[0];
  for (int64_t i = 1; i < n && !std::isnan(best); ++i) {
    if (std::isnan(x[i]) || x[i] > best) best = x[i];
  }
  return best;
}

float ExpShiftSumF32(const float* x, float shift, float* y, int64_t n) {
  if (n <= 0) return 0.0f;
  if (const vecmath::Table* table = Vectorised()) return table->exp_shift_sum(x, shift, y, n);
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    total += y[i];
  }
  return total;
}

float DotF32(const float* x, const float* y, int64_t n) {
  if (n <= 0) return 0.0f;
  if (const vecmath::Table* table = Vectorised()) return table->dot(x, y, n);
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) total += x[i] * y[i];
  return total;
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  if (const vecmath::Table* table = Vectorised()) {
    table->axpy(a, x, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void VecMatF32(const float* x, const float* b, int64_t ldb, int64_t k, int64_t n, float* y) {
  if (n <= 0) return;
  if (const vecmath::Table* table = Vectorised()) {
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
  if (const vecmath::Table* table = Vectorised()) {
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
