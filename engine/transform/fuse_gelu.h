#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// GELU as exporters decompose it, onto one vectorised function (a kElementwiseOp node that the
// MatMul and elementwise fusions can absorb further):
//   erf form (torch.onnx):  Mul(Mul(x, Add(Erf(Div(x, 1.41421)), 1)), 0.5), Div or Mul(0.70711),
//                           operands of Mul and Add in either order
//   tanh form (GPT-2):      Mul(Mul(x, Add(Tanh(Mul(Add(x, Mul(Pow(x, 3), 0.044715)),
//                           0.79788)), 1)), 0.5)
// Five to eight kernels and intermediates become one pass over the tensor.
class FuseGeluPass final : public Pass {
 public:
  const char* name() const override { return "fuse_gelu"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
