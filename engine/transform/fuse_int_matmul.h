#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// MatMulInteger -> Cast(to float) -> the elementwise chain after it (what ONNX Runtime's
// quantize_dynamic writes for every product: a Mul by x_scale * w_scale, then the body's own
// Adds and activation) -> one kFusedMatMulIntegerOp node: the int32 product is converted and the
// chain applied over the output in one pass, instead of a Cast and a node per op each with a
// pass over the product of their own. Exact: the same float operations in the same order.
class FuseIntMatMulPass final : public Pass {
 public:
  const char* name() const override { return "fuse_int_matmul"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
