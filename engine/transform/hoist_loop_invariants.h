#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Loop-invariant code motion: a node of a Loop's body whose inputs are all loop-invariant (the
// body's constants, values it captures from the enclosing graph, outputs of other such nodes)
// computes the same value on every iteration, so it moves before the Loop into the enclosing
// graph and the body captures its outputs instead (a decoder's projection of the encoder's
// output, weights re-laid out from a captured tensor). ONNX Runtime does not do this.
//
// Left in the body: nodes with subgraphs or captures of their own, random generators, fused
// nodes, nodes producing a body output. The Loop node keeps its port map; its body is replaced
// and its implicit inputs gain the hoisted values. What changes: a hoisted node runs once even
// when the Loop runs no iteration (an error it raises then fails the run before the Loop).
class HoistLoopInvariantsPass final : public Pass {
 public:
  const char* name() const override { return "hoist_loop_invariants"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
