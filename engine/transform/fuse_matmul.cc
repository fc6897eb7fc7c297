#include "engine/transform/fuse_matmul.h"

#include "engine/transform/chain.h"

namespace loopserve::engine::transform {
namespace {

// Whether `node` is a Transpose that swaps the last two dims and keeps the others in place.
bool SwapsLastTwo(const Node& node) {
  if (!IsOp(node, "Transpose", 1, 1)) return false;
  absl::StatusOr<std::vector<int64_t>> perm = node.GetInts("perm", std::vector<int64_t>{});
  if (!perm.ok() || perm->size() < 2) return false;
  const int64_t r = static_cast<int64_t>(perm->size());
  for (int64_t i = 0; i < r - 2; ++i) {
    if ((*perm)[i] != i) return false;
  }
  return (*perm)[r - 2] == r - 1 && (*perm)[r - 1] == r - 2;
}

}  // namespace

absl::Status FuseMatMulPass::Run(Graph& graph, const TransformContext& context,
                                 std::vector<std::string>& log) const {
  const ValueUses uses(graph);
  std::vector<int> producer(graph.values.size(), -1);
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    for (ValueId v : graph.nodes[n].outputs) {
      if (v != kNoValue) producer[v] = n;
    }
  }
  std::vector<bool> removed(graph.nodes.size(), false);
  bool changed = false;
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    if (removed[n]) continue;
    const Node& node = graph.nodes[n];
    const bool matmul = IsOp(node, "MatMul", 2, 1);
    const bool gemm = node.op_type == "Gemm" && (node.domain.empty() || node.domain == "ai.onnx") &&
                      node.outputs.size() == 1 && node.outputs[0] != kNoValue &&
                      node.fusion == nullptr;
    if (!matmul && !gemm) continue;

    ChainBuilder chain;
    chain.inputs = node.inputs;  // positional: A, B (and C for Gemm)
    chain.value = node.outputs[0];
    auto spec = std::make_shared<FusionSpec>();
    std::vector<int> folded;  // Transpose nodes folded into the product
    if (matmul) {
      for (int side = 0; side < 2; ++side) {
        const int p = producer[node.inputs[side]];
        if (p < 0 || removed[p] || !uses.Single(node.inputs[side]) ||
            !SwapsLastTwo(graph.nodes[p])) {
          continue;
        }
        chain.inputs[side] = graph.nodes[p].inputs[0];
        (side == 0 ? spec->trans_a : spec->trans_b) = true;
        folded.push_back(p);
      }
    }
    chain.nodes = folded;
    chain.nodes.push_back(n);
    if (gemm) {
      // Only activations: Gemm's own C already is its addend.
      while (uses.Single(chain.value)) {
        const int next = uses.consumer[chain.value];
        if (next < 0 || removed[next]) break;
        const size_t before = chain.post_ops.size();
        ChainBuilder probe = chain;
        if (!probe.Absorb(graph, next, context) || probe.post_ops.size() != before + 1 ||
            probe.post_ops.back().kind != PostOp::Kind::kUnary ||
            probe.inputs.size() != chain.inputs.size()) {
          break;
        }
        chain = std::move(probe);
      }
    } else {
      chain.Grow(graph, uses, removed, context);
    }
    if (chain.post_ops.empty() && folded.empty()) continue;

    Node fused = node;
    fused.op_type = gemm ? node.op_type : kFusedMatMulOp;
    chain.Replace(graph, std::move(fused), std::move(spec), name(), log, removed);
    changed = true;
  }
  if (changed) RemoveNodes(graph, removed);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
