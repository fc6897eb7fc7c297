#include "engine/transform/fuse_softmax.h"

#include "engine/transform/chain.h"

namespace loopserve::engine::transform {

absl::Status FuseSoftmaxPass::Run(Graph& graph, const TransformContext& context,
                                  std::vector<std::string>& log) const {
  const ValueUses uses(graph);
  std::vector<bool> removed(graph.nodes.size(), false);
  bool changed = false;
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    if (removed[n]) continue;
    const Node& node = graph.nodes[n];
    if ((!IsOp(node, "Softmax", 1, 1) && !IsOp(node, "LogSoftmax", 1, 1)) ||
        node.fusion != nullptr) {
      continue;
    }
    ChainBuilder chain;
    chain.inputs = node.inputs;
    chain.value = node.outputs[0];
    chain.nodes = {n};
    chain.Grow(graph, uses, removed, context);
    if (chain.post_ops.empty()) continue;

    chain.Replace(graph, node, std::make_shared<FusionSpec>(), name(), log, removed);
    changed = true;
  }
  if (changed) RemoveNodes(graph, removed);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
