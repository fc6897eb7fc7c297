#include "engine/transform/fuse_int_matmul.h"

#include "engine/tensor/dtype.h"
#include "engine/transform/chain.h"

namespace loopserve::engine::transform {

absl::Status FuseIntMatMulPass::Run(Graph& graph, const TransformContext& context,
                                    std::vector<std::string>& log) const {
  FuseEachNode(graph, [&](int n, const ValueUses& uses, std::vector<bool>& removed) {
    const Node& node = graph.nodes[n];
    if (node.op_type != "MatMulInteger" || !(node.domain.empty() || node.domain == "ai.onnx") ||
        node.fusion != nullptr || node.inputs.size() < 2 || node.inputs.size() > 4 ||
        node.inputs[0] == kNoValue || node.inputs[1] == kNoValue || node.outputs.size() != 1 ||
        !uses.Single(node.outputs[0])) {
      return false;
    }
    const int cast = uses.consumer[node.outputs[0]];
    if (cast < 0 || removed[cast] || !IsOp(graph.nodes[cast], "Cast", 1, 1)) return false;
    absl::StatusOr<int64_t> to = graph.nodes[cast].GetInt("to", 0);
    if (!to.ok() || *to != DataTypeToOnnx(DataType::kFloat32)) return false;

    ChainBuilder chain;
    chain.inputs = node.inputs;  // positional: A, B, a_zero_point, b_zero_point
    chain.inputs.resize(4, kNoValue);
    chain.value = graph.nodes[cast].outputs[0];
    chain.nodes = {n, cast};
    chain.Grow(graph, uses, removed, context);

    Node fused = node;
    fused.op_type = kFusedMatMulIntegerOp;
    chain.Replace(graph, std::move(fused), std::make_shared<FusionSpec>(), name(), log, removed);
    return true;
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
