#include "engine/transform/bf16_products.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/ir/fusion.h"

namespace loopserve::engine::transform {

absl::Status Bf16ProductsPass::Run(Graph& graph, const TransformContext& context,
                                   std::vector<std::string>& log) const {
  if (!context.bf16_products || !context.find_constant) return absl::OkStatus();
  for (Node& node : graph.nodes) {
    if (!(node.domain.empty() || node.domain == "ai.onnx") || node.outputs.size() != 1 ||
        node.inputs.size() < 2 || node.inputs[0] == kNoValue || node.inputs[1] == kNoValue) {
      continue;
    }
    const bool matmul =
        node.op_type == "MatMul" && node.fusion == nullptr && node.inputs.size() == 2;
    const bool fused = node.op_type == kFusedMatMulOp && node.fusion != nullptr &&
                       !node.fusion->trans_a && !node.fusion->trans_b;
    if (!matmul && !fused) continue;
    const Tensor* b = context.find_constant(node.inputs[1]);
    if (b == nullptr || b->dtype() != DataType::kFloat32 || b->rank() != 2) continue;
    log.push_back(
        absl::StrCat(name(), ": ", node.op_type, " '", node.name, "' -> ", kBf16MatMulOp));
    if (matmul) node.fusion = std::make_shared<FusionSpec>();
    node.op_type = kBf16MatMulOp;
  }
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
