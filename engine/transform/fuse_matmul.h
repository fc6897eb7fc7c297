#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// A MatMul and the elementwise chain after it (bias or full-matrix addends, activations,
// residual adds, scales) become one kFusedMatMulOp whose kernel runs the product and applies the
// chain as its epilogue while the result is in cache; a Transpose that swaps the last two dims of
// an operand (and has no other reader) is folded into the product as a transposed read. A Gemm
// keeps its op type and takes the unary activations after it as post-ops. RNN/LSTM cells
// (MatMul + MatMul + Add + Add + Tanh) become one fused product and one plain one.
class FuseMatMulPass final : public Pass {
 public:
  const char* name() const override { return "fuse_matmul"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
