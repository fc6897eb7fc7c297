#include "engine/transform/fuse_softmax.h"

#include "engine/transform/chain.h"

namespace loopserve::engine::transform {

absl::Status FuseSoftmaxPass::Run(Graph& graph, const TransformContext& context,
                                  std::vector<std::string>& log) const {
  FuseEachNode(graph, [&](int n, const ValueUses& uses, std::vector<bool>& removed) {
    const Node& node = graph.nodes[n];
    if ((!IsOp(node, "Softmax", 1, 1) && !IsOp(node, "LogSoftmax", 1, 1)) ||
        node.fusion != nullptr) {
      return false;
    }
    ChainBuilder chain;
    chain.inputs = node.inputs;
    chain.value = node.outputs[0];
    chain.nodes = {n};
    chain.Grow(graph, uses, removed, context);
    if (chain.post_ops.empty()) return false;

    chain.Replace(graph, node, std::make_shared<FusionSpec>(), name(), log, removed);
    return true;
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
