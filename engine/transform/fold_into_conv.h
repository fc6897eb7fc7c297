#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Folds what follows a Conv or ConvTranspose with constant float32 weights (and bias) into those
// weights and bias, as ONNX Runtime's ConvBNFusion / ConvMulFusion / ConvAddFusion do:
//   Conv -> BatchNormalization (inference, constant statistics): W' = W * a, B' = (B - mean) * a
//     + beta per output channel, with a = scale / sqrt(var + epsilon);
//   Conv -> Mul by a constant per output channel or scalar: W' = W * s, B' = B * s;
//   Conv -> Add of a constant per output channel or scalar: B' = B + c.
// Repeats along a chain (Conv -> BN -> Mul -> Add is one Conv). The folded operand must
// broadcast only along the channel axis ([M, 1, ...], [1, M, 1, ...] or one element), so the
// Conv's output shape is the result's. The Conv's result must have no other reader. The new
// weights and bias are constants of the graph (computed in double, stored as float32); the old
// ones are dropped when nothing else reads them.
class FoldIntoConvPass final : public Pass {
 public:
  const char* name() const override { return "fold_into_conv"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
