#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Redundant-node elimination: an Identity, or a Dropout in inference form (one output, no
// training_mode input), is dropped and its readers read its input; a node that repeats an
// earlier one (same op, opset, inputs and attributes: common subexpression elimination) is
// dropped and its readers read the earlier node's outputs. A value the graph returns or a
// subgraph reads keeps its producer (its id is what the caller or the subgraph's capture names);
// nodes with subgraphs, random generators and fused nodes are never merged.
class EliminateRedundantPass final : public Pass {
 public:
  const char* name() const override { return "eliminate_redundant"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
