#include "engine/transform/fuse_elementwise.h"

#include "engine/transform/chain.h"

namespace loopserve::engine::transform {

absl::Status FuseElementwisePass::Run(Graph& graph, const TransformContext& context,
                                      std::vector<std::string>& log) const {
  FuseEachNode(graph, [&](int n, const ValueUses& uses, std::vector<bool>& removed) {
    if (!IsFusableElementwise(graph.nodes[n], context)) return false;
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
      if (!chain.Absorb(graph, n, context)) return false;
    }
    chain.Grow(graph, uses, removed, context);
    if (chain.nodes.size() < 2) return false;  // nothing to fuse with
    Node fused;
    fused.name = start.name;
    fused.op_type = kElementwiseOp;
    fused.opset = start.opset;
    chain.Replace(graph, std::move(fused), std::make_shared<FusionSpec>(), name(), log, removed);
    return true;
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
