#pragma once

// Naive reference kernels: plain loops over any numeric element type (float, double and the 8- to
// 64-bit integers; not bool or the 16-bit float storage types), written for clarity. They are the
// fallback of the oneDNN kernels for element types oneDNN lacks (int64, float64, integer math that
// must wrap rather than saturate) and the oracle of the differential tests. They also hold the
// shape rules (numpy MatMul, Gemm, Softmax, Conv/pool windows, LayerNormalization) that the oneDNN
// kernels share, so both paths accept and reject exactly the same inputs.
//
// Every function is a pure function of its arguments: thread-safe. Outputs are resized (reusing
// their buffers) and must not alias an input. Errors are InvalidArgument with a message naming
// what was wrong (shapes, element types); callers add the node.
//
// Integer semantics follow ONNX Runtime / C++: Add, Sub, Mul, Neg and Abs wrap around on
// overflow; Div truncates toward zero, and a division by zero is an error rather than a crash.
// Float results are computed in double and rounded once, to serve as an oracle.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/ir/eltwise_fn.h"
#include "engine/tensor/shape.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine::reference {

// The rows of engine/ir/eltwise_fn.h. Binary computes Add, Sub, Mul and Div; Unary Relu, Tanh,
// Sigmoid, Exp, Log, Sqrt, Abs and Neg (others: InvalidArgument).
using BinaryOp = ArithOp;
using UnaryOp = EltwiseFn;

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

// Convolution and pooling windows over x = [N, C, spatial...].
enum class AutoPad : uint8_t { kNotSet, kValid, kSameUpper, kSameLower };

// The window attributes as the node gives them. Empty vectors take the defaults: the kernel from W
// (Conv), strides and dilations 1, pads 0. `pads` is [begin..., end...]; ignored unless auto_pad is
// kNotSet.
struct WindowAttrs {
  AutoPad auto_pad = AutoPad::kNotSet;
  std::vector<int64_t> kernel_shape;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;
  bool ceil_mode = false;
};

// Largest kernel dim, stride, dilation or pad accepted (so window arithmetic cannot overflow).
inline constexpr int64_t kMaxWindowAttr = int64_t{1} << 31;

// Checks what does not depend on the input shape: kernel dims, strides and dilations in
// [1, kMaxWindowAttr], pads in [0, kMaxWindowAttr], pads of even length, strides/dilations/kernel
// of the same length. `op` names the op in messages.
absl::Status ValidateWindowAttrs(const WindowAttrs& attrs, absl::string_view op);

// A window resolved against one input shape: per spatial axis, the input size, kernel, stride,
// dilation, the explicit (or auto_pad) pads and the output size.
struct Window {
  int rank = 0;
  Shape::Dims input, kernel, strides, dilations, pads_begin, pads_end, output;
  // The span one window covers on axis i: (kernel - 1) * dilation + 1.
  int64_t extent(int i) const { return (kernel[i] - 1) * dilations[i] + 1; }
};

// Resolves `attrs` for x = [N, C, spatial...] and the spatial `kernel`. InvalidArgument when x has
// rank < 3, attribute lengths differ from the spatial rank, or a window does not fit the padded
// input. Pools (`pool`) also require each pad to be smaller than the window extent; Conv rejects a
// pad larger than both the extent and the input.
absl::StatusOr<Window> ResolveWindow(const Shape& x, absl::Span<const int64_t> kernel,
                                     const WindowAttrs& attrs, bool pool, absl::string_view op);

// Conv: x [N, C, s...], w [M, C / group, k...], optional b [M]. Checks every shape against the
// others and returns the output shape [N, M, o...] with the resolved window.
absl::StatusOr<Shape> ConvShapes(const Shape& x, const Shape& w, const Shape* b,
                                 const WindowAttrs& attrs, int64_t group, Window* window);

// ConvTranspose's attributes: the window ones (kernel_shape, strides, dilations, pads, auto_pad),
// group, output_padding and output_shape (empty when absent).
struct ConvTransposeAttrs {
  WindowAttrs window;
  int64_t group = 1;
  std::vector<int64_t> output_padding;
  std::vector<int64_t> output_shape;
};

// ConvTranspose: x [N, C, s...], w [C, M / group, k...], optional b [M] -> [N, M, o...]. Input
// element i of an axis reaches output i * stride + k * dilation - pads_begin for every kernel
// tap k; `window` gets the input and output sizes and pads_begin / pads_end (either may be
// negative: an output_shape or output_padding larger than what the input covers extends the
// output with zeros). The output size is output_shape when given (pads from the spec's
// total_padding rule), input * stride for SAME_UPPER / SAME_LOWER, and otherwise
// stride * (input - 1) + output_padding + (k - 1) * dilation + 1 - pads.
absl::StatusOr<Shape> ConvTransposeShapes(const Shape& x, const Shape& w, const Shape* b,
                                          const ConvTransposeAttrs& attrs, Window* window);

enum class PoolKind : uint8_t { kMax, kAverage, kLp };
struct PoolAttrs {
  PoolKind kind = PoolKind::kMax;
  WindowAttrs window;
  bool count_include_pad = false;  // AveragePool
  int64_t storage_order = 0;       // MaxPool Indices: 0 row-major, 1 column-major
  float p = 2.0f;                  // LpPool
};

// Global pools: [N, C, s...] -> [N, C, 1...]. InvalidArgument for rank < 3 or an empty spatial
// extent with a non-empty output.
absl::StatusOr<Shape> GlobalPoolShape(const Shape& x, absl::string_view op);

// LayerNormalization views x as [outer, inner] split at `axis`; Mean and InvStdDev have x's shape
// with the dims from `axis` on set to 1.
struct LayerNormDims {
  int axis = 0;
  int64_t outer = 0;
  int64_t inner = 0;
  Shape stats;
};
absl::StatusOr<LayerNormDims> LayerNormShapes(const Shape& x, int64_t axis);

enum class ActivationOp : uint8_t {
  kLeakyRelu,    // x >= 0 ? x : alpha * x
  kElu,          // x >= 0 ? x : alpha * (exp(x) - 1)
  kSelu,         // gamma * (x > 0 ? x : alpha * (exp(x) - 1))
  kHardSigmoid,  // max(0, min(1, alpha * x + beta))
  kHardSwish,    // x * max(0, min(1, x / 6 + 1 / 2))
  kSoftplus,     // log(1 + exp(x))
  kSoftsign,     // x / (1 + |x|)
  kCelu,         // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
};
struct ActivationParams {
  float alpha = 0.0f;
  float beta = 0.0f;
  float gamma = 0.0f;
};
absl::string_view ActivationOpName(ActivationOp op);

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

// LogSoftmax, with the same axis rules as Softmax.
absl::Status LogSoftmax(const Tensor& x, int64_t axis, bool coerce_2d, Tensor& out);

// Floating-point Conv; see ConvShapes.
absl::Status Conv(const Tensor& x, const Tensor& w, const Tensor* b, const WindowAttrs& attrs,
                  int64_t group, Tensor& out);

// Floating-point ConvTranspose; see ConvTransposeShapes.
absl::Status ConvTranspose(const Tensor& x, const Tensor& w, const Tensor* b,
                           const ConvTransposeAttrs& attrs, Tensor& out);

// MaxPool (any numeric type), AveragePool and LpPool (floating point). `indices` (may be null)
// receives MaxPool's int64 argmax indices into the flattened input. A max over a window that lies
// wholly in padding is the type's lowest value; an average over no element is 0.
absl::Status Pool(const Tensor& x, const PoolAttrs& attrs, Tensor& out, Tensor* indices);

// GlobalMaxPool (any numeric type) and GlobalAveragePool (floating point).
absl::Status GlobalPool(PoolKind kind, const Tensor& x, Tensor& out);

// BatchNormalization in inference mode: y = scale * (x - mean) / sqrt(var + epsilon) + bias per
// channel of x = [N, C, ...]. The four vectors have C elements, or C * prod(spatial) for the
// opset < 9 `spatial = 0` form.
absl::Status BatchNorm(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean,
                       const Tensor& var, float epsilon, Tensor& out);

// InstanceNormalization: per (n, c), normalised over the spatial dims; scale and bias have C
// elements.
absl::Status InstanceNorm(const Tensor& x, const Tensor& scale, const Tensor& bias, float epsilon,
                          Tensor& out);

// LayerNormalization (opset 17); scale and bias (may be null) broadcast onto x's dims from `axis`
// on. `mean` and `inv_std_dev` (may be null) get the statistics in `stats_type`.
absl::Status LayerNorm(const Tensor& x, const Tensor& scale, const Tensor* bias, int64_t axis,
                       float epsilon, DataType stats_type, Tensor& out, Tensor* mean,
                       Tensor* inv_std_dev);

// LRN across channels: y = x / (bias + alpha / size * sum(x^2 over the window))^beta, the window
// spanning channels [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)].
absl::Status Lrn(const Tensor& x, int64_t size, float alpha, float beta, float bias, Tensor& out);

// The floating-point activations of ActivationOp.
absl::Status Activation(ActivationOp op, const ActivationParams& params, const Tensor& x,
                        Tensor& out);

// PRelu: x < 0 ? slope * x : x, `slope` broadcast onto x (unidirectionally).
absl::Status PRelu(const Tensor& x, const Tensor& slope, Tensor& out);

}  // namespace loopserve::engine::reference
