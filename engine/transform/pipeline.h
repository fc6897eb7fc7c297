#pragma once

// The default graph optimizer pipeline and the text dumps `looprun --dump_plan` prints.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// The passes in the order they run: lowered cell loops, loop-body identities, hoisted input
// projections and loop-invariant nodes, constant folding, BatchNormalization / Mul / Add folded
// into the Conv before them, Identity / Dropout / repeated nodes dropped, Conv epilogues,
// decomposed LayerNorm and GELU onto their fused forms, MatMul/Gemm epilogues and folded
// transposes, then the remaining elementwise chains.
const std::vector<std::unique_ptr<Pass>>& DefaultPasses();

// Runs DefaultPasses() on a copy of `graph` and returns it, or `graph` itself when no pass
// changed anything. Subgraphs (Loop bodies, If branches) are optimised when they are compiled.
// Appends one line per rewrite to `log` (may be null).
absl::StatusOr<std::shared_ptr<const Graph>> Optimize(std::shared_ptr<const Graph> graph,
                                                      const TransformContext& context,
                                                      std::vector<std::string>* log);

// One line per node: "  [3] Tanh 'name' (x, y) -> (z)" with fused nodes described.
std::string DumpNodes(const Graph& graph);

}  // namespace loopserve::engine::transform
