#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Chains of elementwise ops (Add/Sub/Mul/Div/Max/Min, Pow by a constant, activations, earlier
// kElementwiseOp nodes) whose intermediate values have no other reader become one kElementwiseOp
// node: one pass over the output with every operand broadcast, instead of one kernel and one
// intermediate tensor per op. Measured on the grid's LSTM/GRU gate math and LayerNorm tails.
class FuseElementwisePass final : public Pass {
 public:
  const char* name() const override { return "fuse_elementwise"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
