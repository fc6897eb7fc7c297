#include "engine/transform/pipeline.h"

#include "absl/strings/str_cat.h"
#include "engine/transform/bf16_products.h"
#include "engine/transform/blocked_layout.h"
#include "engine/transform/elide_loop_identities.h"
#include "engine/transform/eliminate_redundant.h"
#include "engine/transform/fold_constants.h"
#include "engine/transform/fold_into_conv.h"
#include "engine/transform/fold_qdq.h"
#include "engine/transform/fuse_conv.h"
#include "engine/transform/fuse_elementwise.h"
#include "engine/transform/fuse_gelu.h"
#include "engine/transform/fuse_int_matmul.h"
#include "engine/transform/fuse_layer_norm.h"
#include "engine/transform/fuse_matmul.h"
#include "engine/transform/fuse_softmax.h"
#include "engine/transform/graph_util.h"
#include "engine/transform/hoist_loop_invariants.h"
#include "engine/transform/hoist_loop_projections.h"
#include "engine/transform/lower_cell_loops.h"

namespace loopserve::engine::transform {

const std::vector<std::unique_ptr<Pass>>& DefaultPasses() {
  static const std::vector<std::unique_ptr<Pass>>* passes = [] {
    auto* list = new std::vector<std::unique_ptr<Pass>>();
    list->push_back(std::make_unique<FoldQdqPass>());
    list->push_back(std::make_unique<LowerCellLoopsPass>());
    list->push_back(std::make_unique<ElideLoopIdentitiesPass>());
    list->push_back(std::make_unique<HoistLoopProjectionsPass>());
    list->push_back(std::make_unique<HoistLoopInvariantsPass>());
    list->push_back(std::make_unique<FoldConstantsPass>());
    list->push_back(std::make_unique<FoldIntoConvPass>());
    list->push_back(std::make_unique<EliminateRedundantPass>());
    list->push_back(std::make_unique<FuseConvPass>());
    list->push_back(std::make_unique<FuseLayerNormPass>());
    list->push_back(std::make_unique<FuseGeluPass>());
    list->push_back(std::make_unique<FuseIntMatMulPass>());
    list->push_back(std::make_unique<FuseMatMulPass>());
    list->push_back(std::make_unique<FuseSoftmaxPass>());
    list->push_back(std::make_unique<FuseElementwisePass>());
    list->push_back(std::make_unique<BlockedLayoutPass>());
    list->push_back(std::make_unique<Bf16ProductsPass>());
    return list;
  }();
  return *passes;
}

namespace {

// Drops the constants no node, subgraph or output reads any more (the weights a fold replaced).
void DropUnreadConstants(Graph& graph) {
  const ValueUses uses(graph);
  std::vector<std::pair<ValueId, std::shared_ptr<const Tensor>>> kept;
  for (auto& entry : graph.constants) {
    if (uses.count[entry.first] > 0) kept.push_back(std::move(entry));
  }
  graph.constants = std::move(kept);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Graph>> Optimize(std::shared_ptr<const Graph> graph,
                                                      const TransformContext& context,
                                                      std::vector<std::string>* log) {
  auto copy = std::make_shared<Graph>(*graph);
  // The passes see the constants earlier passes made (kept in the copy) as well as the enclosing
  // graphs' ones.
  TransformContext local = context;
  local.find_constant = [&copy, &context](ValueId id) -> const Tensor* {
    for (const auto& [value, tensor] : copy->constants) {
      if (value == id) return tensor.get();
    }
    return context.find_constant ? context.find_constant(id) : nullptr;
  };
  std::vector<std::string> lines;
  for (const std::unique_ptr<Pass>& pass : DefaultPasses()) {
    absl::Status status = pass->Run(*copy, local, lines);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("graph '", graph->name, "': pass ",
                                                      pass->name(), ": ", status.message()));
    }
  }
  if (lines.empty()) return graph;
  DropUnreadConstants(*copy);
  if (log != nullptr) log->insert(log->end(), lines.begin(), lines.end());
  return std::shared_ptr<const Graph>(std::move(copy));
}

std::string DumpNodes(const Graph& graph) {
  std::string text;
  auto names = [&](const std::vector<ValueId>& ids) {
    std::string s;
    for (ValueId v : ids) {
      absl::StrAppend(&s, s.empty() ? "" : ", ", v == kNoValue ? "-" : graph.ValueName(v));
    }
    return s;
  };
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    absl::StrAppend(&text, "  [", n, "] ", node.op_type, " '", node.name, "' (", names(node.inputs),
                    ") -> (", names(node.outputs), ")");
    if (node.fusion != nullptr) {
      absl::StrAppend(&text, "  {", DescribeFusion(node.op_type, *node.fusion), "}");
    }
    // The blocked-layout pass's marks (blocked_layout.h): which side of the node is blocked.
    const Attribute* src = node.FindAttribute("_blocked_src");
    const Attribute* dst = node.FindAttribute("_blocked_dst");
    if (node.FindAttribute("_blocked") != nullptr || src != nullptr) {
      absl::StrAppend(&text, "  [blocked ",
                      src == nullptr ? "in, out"
                      : src->i != 0  ? "in"
                                     : "plain in",
                      ", ", dst == nullptr || dst->i != 0 ? "out" : "plain out", "]");
    }
    absl::StrAppend(&text, "\n");
  }
  return text;
}

}  // namespace loopserve::engine::transform
