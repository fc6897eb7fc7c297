#pragma once

// Naive reference kernels: plain loops over any numeric element type (float, double and the 8- to
// 64-bit integers; not bool or the 16-bit float storage types), written for clarity. They are the
// fallback of the oneDNN kernels for element types oneDNN lacks (int64, float64, integer math that
// must wrap rather than saturate) and the oracle of the differential tests. They also hold the
// shape rules (numpy MatMul, Gemm, Softmax) that the oneDNN kernels share, so both paths accept
// and reject exactly the same inputs.
//
// Every function is a pure function of its arguments: thread-safe. Outputs are resized (reusing
// their buffers) and must not alias an input. Errors are InvalidArgument with a message naming
// what was wrong (shapes, element types); callers add the node.
//
// Integer semantics follow ONNX Runtime / C++: Add, Sub, Mul, Neg and Abs wrap around on
// overflow; Div truncates toward zero, and a division by zero is an error rather than a crash.
// Float results are computed in double and rounded once, to serve as an oracle.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tensor/shape.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine::reference {

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv };
enum class UnaryOp : uint8_t { kRelu, kTanh, kSigmoid, kExp, kLog, kSqrt, kAbs, kNeg };

absl::string_view BinaryOpName(BinaryOp op);  // "Add", ...
absl::string_view UnaryOpName(UnaryOp op);    // "Relu", ...

// --- Shape rules -------------------------------------------------------------------------------

// The operands of a numpy matmul after 1-D promotion: a is [batch..., m, k], b is
// [batch..., k, n], each with its batch dims padded with leading 1s to the output's batch rank.
struct MatMulDims {
  Shape output;   // the ONNX/numpy result shape (promoted 1-D dims removed again)
  Shape batch;    // broadcast batch dims of the result
  Shape a_batch;  // batch dims of a, padded (1 = broadcast)
  Shape b_batch;  // batch dims of b, padded (1 = broadcast)
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
};
// InvalidArgument for rank-0 operands, differing inner dims, or batch dims that do not broadcast.
absl::StatusOr<MatMulDims> MatMulShapes(const Shape& a, const Shape& b);

struct GemmAttrs {
  float alpha = 1.0f;
  float beta = 1.0f;
  bool trans_a = false;
  bool trans_b = false;
  // Gemm before opset 7 with broadcast=0: C must already have the shape [M, N].
  bool c_exact_shape = false;
};
struct GemmDims {
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
};
// A and B must be 2-D with matching inner dims; C (may be null) must broadcast onto [M, N]
// unidirectionally.
absl::StatusOr<GemmDims> GemmShapes(const Shape& a, const Shape& b, const Shape* c,
                                    const GemmAttrs& attrs);

// Softmax viewed as [outer, axis_dim, inner], normalised along the middle dim. Opset < 13
// (`coerce_2d`) flattens the input to 2-D at `axis`, so the normalised dim is everything from
// `axis` on and inner is 1; opset >= 13 normalises along `axis` alone.
struct SoftmaxDims {
  int64_t outer = 0;
  int64_t axis_dim = 0;
  int64_t inner = 0;
};
absl::StatusOr<SoftmaxDims> SoftmaxShapes(const Shape& x, int64_t axis, bool coerce_2d);

// --- Kernels -----------------------------------------------------------------------------------

// out = a <op> b with numpy multidirectional broadcasting. a and b must have the same type.
absl::Status Binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);

// out = op(x) elementwise. Relu, Abs and Neg also take integers (Neg only signed ones); the others
// only floating point.
absl::Status Unary(UnaryOp op, const Tensor& x, Tensor& out);

// numpy matmul (1-D operands promoted and the promoted dims removed, batch dims broadcast).
absl::Status MatMul(const Tensor& a, const Tensor& b, Tensor& out);

// out = alpha * A' * B' + beta * C, with A' = transpose(A) if trans_a (likewise B'); `c` may be
// null. For integer types alpha and beta are applied in double and the result truncated, except
// that alpha = beta = 1 is computed exactly in the integer type.
absl::Status Gemm(const Tensor& a, const Tensor& b, const Tensor* c, const GemmAttrs& attrs,
                  Tensor& out);

// Softmax of floating-point `x`; see SoftmaxShapes for `axis` and `coerce_2d`.
absl::Status Softmax(const Tensor& x, int64_t axis, bool coerce_2d, Tensor& out);

}  // namespace loopserve::engine::reference
