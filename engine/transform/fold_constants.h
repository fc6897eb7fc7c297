#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Constant folding: a node whose inputs are all constant (initializers, Constant nodes, values
// folded before it, an enclosing graph's constants a Loop body or If branch captures) is run once
// here with the engine's own kernels (TransformContext::evaluate) and its outputs become
// constants of the graph; the node is dropped. Also Shape and Size of a top-level input whose
// declared shape is fully known (checked on every run). Since the pipeline runs on every graph
// it compiles, this covers Loop bodies and If branches too: Silero VAD v5 builds its LSTM weights
// by Slice -> Concat -> Unsqueeze of the model's constants inside an If branch, on every request.
//
// Left alone: nodes with subgraphs or captures (Loop, If, Scan), random generators, fused nodes,
// nodes without inputs, nodes whose evaluation fails (the run reports the error, as before) and
// results more than 1 MiB larger than their inputs together (an Expand or Tile of a small
// constant is cheaper to recompute than to hold).
class FoldConstantsPass final : public Pass {
 public:
  const char* name() const override { return "fold_constants"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
