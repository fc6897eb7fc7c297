#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// The QDQ format (what ONNX Runtime's quantize_static writes: DequantizeLinear in front of every
// quantized operand of a MatMul / Gemm / Conv) folded into integer products, as ONNX Runtime's
// QDQ transformers fold it:
//
//   MatMul(DQ(a_q, a_s, a_zp), DQ(b_q, b_s, b_zp))
//     -> Cast<float>(MatMulInteger(a_q, b_q, a_zp, b_zp)) * (a_s * b_s)
//   Gemm(DQ(a), DQ(b), c; alpha, beta = 1, transA = 0, transB)
//     -> the same with b_q transposed once at load when transB, times alpha, + c
//   Conv(DQ(x_q, x_s, x_zp), DQ(w_q, w_s, w_zp), bias)
//     -> Cast<float>(ConvInteger(x_q, w_q, x_zp, w_zp)) * (x_s * w_s) + bias, per output channel
//
// The product then runs on the int8 kernels (native::Int8Gemm / oneDNN's int8 matmul, the
// im2col ConvInteger), and fuse_int_matmul fuses the Cast, the scale and what follows into its
// epilogue. Only the forms whose dequantization factors out of the sum fold: a per tensor, b per
// tensor or per output column (per output channel for Conv), 8-bit operands, float32 constant
// scales and constant zero points, constant b; anything else is left as it is. The result equals
// the dequantized float product up to float32 rounding (the sum is exact in int32 and scaled once).
//
// Runs first in the pipeline, before the Loop passes hoist a body's weight DequantizeLinear out
// of the body and fold_constants turns it into a float weight, and rewrites the graph's Loop
// bodies and If branches too (they are optimized again when compiled, with nothing left to fold).
class FoldQdqPass final : public Pass {
 public:
  const char* name() const override { return "fold_qdq"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
