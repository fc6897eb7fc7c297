#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// LayerNormalization over the last axis as opset < 17 exports decompose it:
//   m = ReduceMean(x, [-1]); d = x - m; v = ReduceMean(Pow(d, 2) | Mul(d, d), [-1]);
//   y = d / Sqrt(v + eps) [* gamma [+ beta]]
// becomes one LayerNormalization node (opset 17; oneDNN's layer normalization primitive):
// nine kernels, two reductions and five intermediates become one pass.
class FuseLayerNormPass final : public Pass {
 public:
  const char* name() const override { return "fuse_layer_norm"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
