#include "engine/transform/fuse_elementwise.h"

#include "engine/transform/chain.h"

namespace loopserve::engine::transform {

absl::Status FuseElementwisePass::Run(Graph& graph, const TransformContext& context,
                                      std::vector<std::string>& log) const {
  const ValueUses uses(graph);
  std::vector<bool> removed(graph.nodes.size(), false);
  bool changed = false;
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    if (removed[n] || !IsFusableElementwise(graph.nodes[n], context)) continue;
    const Node& start = graph.nodes[n];
    ChainBuilder chain;
    if (start.op_type == kElementwiseOp) {
      chain.inputs = start.inputs;
      chain.post_ops = start.fusion->post_ops;
      chain.nodes = {n};
      chain.value = start.outputs[0];
    } else {
      chain.value = start.inputs[0];
      chain.inputs = {start.inputs[0]};
      if (!chain.Absorb(graph, n, context)) continue;
    }
    chain.Grow(graph, uses, removed, context);
    if (chain.nodes.size() < 2) continue;  // nothing to fuse with
    Node fused;
    fused.name = start.name;
    fused.op_type = kElementwiseOp;
    fused.opset = start.opset;
    chain.Replace(graph, std::move(fused), std::make_shared<FusionSpec>(), name(), log, removed);
    changed = true;
  }
  if (changed) RemoveNodes(graph, removed);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
