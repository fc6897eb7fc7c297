#pragma once

// The elementwise functions of the engine, one table row each: the IR's fused post-ops
// (engine/ir/fusion.h), the fusion passes (engine/transform/chain.cc), the native vector math
// (engine/kernels/native/vector_math.h: VecUnary / VecBinary are these enums), the reference
// kernels (reference::UnaryOp / BinaryOp) and the kernel registration all read the same rows, so
// that adding a native elementwise op of one input is:
//   1. a row below (its name, what the table drives for it, its scalar definition in float);
//   2. its vector code: a case of ApplyUnary in engine/kernels/native/vector_math_impl.inc (and the
//      SLEEF macro in vector_math_avx2.cc / vector_math_avx512.cc if it calls a new one);
//   3. its double-precision oracle and input range in
//      tests/unit/engine/kernels/native/vector_math_test.cc (Reference's switch, UnaryCase list).
// The compiler's -Wswitch points at ApplyUnary and Reference when the row is added.
//
// Row: X(enumerator, name, flags, scalar expression of `x` (type T), `alpha`, `beta` (float))
//   name: plan dumps and, where the flags say so, the ONNX op the function is with its defaults.
//   flags (EltwiseFlags):
//     kEltwiseFuse: the fusion passes fold the ONNX op `name` (one input, no attributes) into a
//       chain of post-ops (LeakyRelu, Elu, HardSigmoid, Clip and Pow, whose attributes or
//       constant inputs become alpha / beta, are matched by chain.cc itself).
//     kEltwiseDnnl: the oneDNN family's elementwise kernel registers the ONNX op `name` (an eltwise
//       primitive, or the native chain for small float32 tensors; any element type oneDNN has).
//     kEltwiseVector: engine/kernels/native/math.cc registers the ONNX op `name` on the table's
//       kernel: float32 on the vector math, float64 on the scalar expression.
//   The scalar expression is the function's definition: the vector math's fallback for CPUs
//   without AVX2 and the table kernel's float64 path.
#define LS_ELTWISE_FNS(X)                                                                          \
  X(kIdentity, "Identity", 0, x)                                                                   \
  X(kRelu, "Relu", kEltwiseFuse | kEltwiseDnnl, x < T(0) ? T(0) : x)                               \
  X(kTanh, "Tanh", kEltwiseFuse | kEltwiseDnnl, std::tanh(x))                                      \
  X(kSigmoid, "Sigmoid", kEltwiseFuse | kEltwiseDnnl, 1.0f / (1.0f + std::exp(-x)))                \
  X(kExp, "Exp", kEltwiseFuse | kEltwiseDnnl, std::exp(x))                                         \
  X(kLog, "Log", kEltwiseFuse | kEltwiseDnnl, std::log(x))                                         \
  X(kSqrt, "Sqrt", kEltwiseFuse | kEltwiseDnnl, std::sqrt(x))                                      \
  X(kAbs, "Abs", kEltwiseFuse | kEltwiseDnnl, std::fabs(x))                                        \
  X(kNeg, "Neg", kEltwiseFuse | kEltwiseDnnl, -x)                                                  \
  X(kErf, "Erf", kEltwiseFuse | kEltwiseVector, std::erf(x))                                       \
  /* log(1 + exp(x)) */                                                                            \
  X(kSoftplus, "Softplus", kEltwiseFuse, std::fmax(x, T(0)) + std::log1p(std::exp(-std::fabs(x)))) \
  /* 0.5 x (1 + erf(x / sqrt 2)) */                                                                \
  X(kGeluErf, "GeluErf", 0, 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)))                \
  /* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */                                          \
  X(kGeluTanh, "GeluTanh", 0,                                                                      \
    0.5f * x * (1.0f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x))))             \
  X(kSin, "Sin", kEltwiseVector, std::sin(x))                                                      \
  X(kCos, "Cos", kEltwiseVector, std::cos(x))                                                      \
  X(kReciprocal, "Reciprocal", kEltwiseFuse, 1.0f / x)                                             \
  X(kLinear, "Linear", 0, alpha* x + beta)                                                         \
  X(kPow, "Pow", 0, std::pow(x, alpha))                                                            \
  X(kLeakyRelu, "LeakyRelu", 0, x >= T(0) ? x : alpha * x)                                         \
  X(kElu, "Elu", 0, x >= T(0) ? x : alpha * std::expm1(x))                                         \
  X(kHardSigmoid, "HardSigmoid", 0, std::fmin(T(1), std::fmax(T(0), alpha* x + beta)))             \
  X(kHardSwish, "HardSwish", kEltwiseFuse, x* std::fmin(T(1), std::fmax(T(0), x / 6.0f + 0.5f)))   \
  /* x / (1 + |x|) */                                                                              \
  X(kSoftsign, "Softsign", kEltwiseFuse, x / (1.0f + std::fabs(x)))                                \
  /* min(max(x, alpha), beta), NaN kept */                                                         \
  X(kClip, "Clip", 0,                                                                              \
    std::isnan(x) ? x : (beta < (x < alpha ? alpha : x) ? beta : (x < alpha ? alpha : x)))         \
  X(kFloor, "Floor", 0, std::floor(x))                                                             \
  X(kCeil, "Ceil", 0, std::ceil(x))                                                                \
  /* half to even */                                                                               \
  X(kRound, "Round", kEltwiseVector, std::nearbyint(x))                                            \
  /* x tanh(softplus(x)) */                                                                        \
  X(kMish, "Mish", kEltwiseVector,                                                                 \
    x* std::tanh(std::fmax(x, T(0)) + std::log1p(std::exp(-std::fabs(x)))))                        \
  X(kTan, "Tan", kEltwiseVector, std::tan(x))                                                      \
  X(kAsin, "Asin", kEltwiseVector, std::asin(x))                                                   \
  X(kAcos, "Acos", kEltwiseVector, std::acos(x))                                                   \
  X(kAtan, "Atan", kEltwiseVector, std::atan(x))                                                   \
  X(kSinh, "Sinh", kEltwiseVector, std::sinh(x))                                                   \
  X(kCosh, "Cosh", kEltwiseVector, std::cosh(x))                                                   \
  X(kAsinh, "Asinh", kEltwiseVector, std::asinh(x))                                                \
  X(kAcosh, "Acosh", kEltwiseVector, std::acosh(x))                                                \
  X(kAtanh, "Atanh", kEltwiseVector, std::atanh(x))

// Binary arithmetic, one row each: X(enumerator, name, flags, scalar expression of `a`, `b`).
// kPRelu: a >= 0 ? a : a * b (ONNX PRelu, b the slope). Max and Min return NaN when either
// operand is NaN (numpy's rule).
#define LS_ARITH_OPS(X)                                                                 \
  X(kAdd, "Add", kEltwiseFuse | kEltwiseDnnl, a + b)                                    \
  X(kSub, "Sub", kEltwiseFuse | kEltwiseDnnl, a - b)                                    \
  X(kMul, "Mul", kEltwiseFuse | kEltwiseDnnl, a * b)                                    \
  X(kDiv, "Div", kEltwiseFuse | kEltwiseDnnl, a / b)                                    \
  X(kMax, "Max", kEltwiseFuse, std::isnan(a) ? a : std::isnan(b) ? b : (a < b ? b : a)) \
  X(kMin, "Min", kEltwiseFuse, std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a)) \
  X(kPow, "Pow", 0, std::pow(a, b))                                                     \
  X(kPRelu, "PRelu", 0, a >= T(0) ? a : a * b)

#include <cmath>
#include <cstdint>

namespace loopserve::engine {

enum EltwiseFlags : uint32_t {
  kEltwiseFuse = 1u << 0,
  kEltwiseDnnl = 1u << 1,
  kEltwiseVector = 1u << 2,
};

// Elementwise functions of one value (parameters in PostOp::alpha / beta where they say so).
enum class EltwiseFn : uint8_t {
#define LS_ELTWISE_ENUMERATOR(e, name, flags, expr) e,
  LS_ELTWISE_FNS(LS_ELTWISE_ENUMERATOR)
#undef LS_ELTWISE_ENUMERATOR
      kCount,
};

// Binary arithmetic.
enum class ArithOp : uint8_t {
#define LS_ARITH_ENUMERATOR(e, name, flags, expr) e,
  LS_ARITH_OPS(LS_ARITH_ENUMERATOR)
#undef LS_ARITH_ENUMERATOR
      kCount,
};

inline constexpr int kNumEltwiseFns = static_cast<int>(EltwiseFn::kCount);
inline constexpr int kNumArithOps = static_cast<int>(ArithOp::kCount);

// The row's name ("Relu", "GeluErf", ...) and flags; "?" and 0 for kCount.
const char* EltwiseFnName(EltwiseFn fn);
uint32_t EltwiseFnFlags(EltwiseFn fn);
const char* ArithOpName(ArithOp op);
uint32_t ArithOpFlags(ArithOp op);

// The function whose row has `flag` and is named `op_type` (an ONNX op), if any.
bool EltwiseFnOfOp(const char* op_type, uint32_t flag, EltwiseFn* fn);
bool ArithOpOfOp(const char* op_type, uint32_t flag, ArithOp* op);

// The row's scalar definition, in T (float, or double for the float64 paths).
template <typename T>
T EltwiseScalar(EltwiseFn fn, T x, float alpha = 0.0f, float beta = 0.0f) {
  (void)alpha;
  (void)beta;
  switch (fn) {
#define LS_ELTWISE_SCALAR(e, name, flags, expr) \
  case EltwiseFn::e:                            \
    return static_cast<T>(expr);
    LS_ELTWISE_FNS(LS_ELTWISE_SCALAR)
#undef LS_ELTWISE_SCALAR
    case EltwiseFn::kCount:
      break;
  }
  return x;
}

template <typename T>
T ArithScalar(ArithOp op, T a, T b) {
  switch (op) {
#define LS_ARITH_SCALAR(e, name, flags, expr) \
  case ArithOp::e:                            \
    return static_cast<T>(expr);
    LS_ARITH_OPS(LS_ARITH_SCALAR)
#undef LS_ARITH_SCALAR
    case ArithOp::kCount:
      break;
  }
  return a;
}

}  // namespace loopserve::engine
