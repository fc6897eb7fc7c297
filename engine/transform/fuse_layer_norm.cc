#include "engine/transform/fuse_layer_norm.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

// A ReduceMean over the last axis only, keeping dims (axes as an attribute before opset 18).
bool IsMeanOverLastAxis(const Node& node, const TransformContext& context) {
  if (node.op_type != "ReduceMean" || !(node.domain.empty() || node.domain == "ai.onnx") ||
      node.outputs.size() != 1 || node.inputs.empty() || node.inputs[0] == kNoValue) {
    return false;
  }
  absl::StatusOr<int64_t> keepdims = node.GetInt("keepdims", 1);
  if (!keepdims.ok() || *keepdims != 1) return false;
  if (node.opset < 18) {
    if (node.inputs.size() != 1) return false;
    absl::StatusOr<std::vector<int64_t>> axes = node.GetInts("axes", std::vector<int64_t>{});
    return axes.ok() && axes->size() == 1 && (*axes)[0] == -1;
  }
  if (node.inputs.size() != 2 || !context.find_constant) return false;
  const Tensor* axes = context.find_constant(node.inputs[1]);
  return axes != nullptr && axes->dtype() == DataType::kInt64 && axes->NumElements() == 1 &&
         axes->data<int64_t>()[0] == -1;
}

}  // namespace

absl::Status FuseLayerNormPass::Run(Graph& graph, const TransformContext& context,
                                    std::vector<std::string>& log) const {
  const ValueUses uses(graph);
  auto reader = [&](ValueId v, const char* op, size_t inputs) {
    if (!uses.Single(v)) return -1;
    const int c = uses.consumer[v];
    return c >= 0 && IsOp(graph.nodes[c], op, inputs, 1) ? c : -1;
  };
  // Readers of `v` (for the centred value, read by the square and the division).
  std::vector<std::vector<int>> readers(graph.values.size());
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    for (ValueId v : graph.nodes[n].inputs) {
      if (v != kNoValue) readers[v].push_back(n);
    }
  }
  std::vector<bool> removed(graph.nodes.size(), false);
  bool changed = false;
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    if (removed[n] || !IsMeanOverLastAxis(graph.nodes[n], context)) continue;
    const ValueId x = graph.nodes[n].inputs[0];
    const ValueId mean = graph.nodes[n].outputs[0];
    const int sub = reader(mean, "Sub", 2);
    if (sub < 0 || graph.nodes[sub].inputs[0] != x || graph.nodes[sub].inputs[1] != mean) continue;
    const ValueId d = graph.nodes[sub].outputs[0];
    // d is read twice (square, division) and by nothing else.
    if (uses.count[d] != 2 || readers[d].size() != 2) continue;
    int square = -1, div = -1;
    for (int r : readers[d]) {
      const Node& rn = graph.nodes[r];
      if (IsOp(rn, "Pow", 2, 1) && rn.inputs[0] == d) {
        std::optional<float> e = ScalarConstant(context, rn.inputs[1]);
        if (e.has_value() && *e == 2.0f) square = r;
      } else if (IsOp(rn, "Mul", 2, 1) && rn.inputs[0] == d && rn.inputs[1] == d) {
        square = r;
      } else if (IsOp(rn, "Div", 2, 1) && rn.inputs[0] == d) {
        div = r;
      }
    }
    if (square < 0 || div < 0) continue;
    if (!uses.Single(graph.nodes[square].outputs[0])) continue;
    const int var = uses.consumer[graph.nodes[square].outputs[0]];
    if (var < 0 || !IsMeanOverLastAxis(graph.nodes[var], context)) continue;
    const int add = reader(graph.nodes[var].outputs[0], "Add", 2);
    if (add < 0) continue;
    const Node& add_node = graph.nodes[add];
    const ValueId var_value = graph.nodes[var].outputs[0];
    std::optional<float> eps = ScalarConstant(
        context, add_node.inputs[0] == var_value ? add_node.inputs[1] : add_node.inputs[0]);
    if (!eps.has_value() || *eps < 0) continue;
    const int sqrt = reader(add_node.outputs[0], "Sqrt", 1);
    if (sqrt < 0 || graph.nodes[div].inputs[1] != graph.nodes[sqrt].outputs[0] ||
        !uses.Single(graph.nodes[sqrt].outputs[0])) {
      continue;
    }
    std::vector<int> nodes = {n, sub, square, var, add, sqrt, div};
    ValueId out = graph.nodes[div].outputs[0];
    const int scale = reader(out, "Mul", 2);
    if (scale < 0) continue;  // LayerNormalization needs a scale
    const Node& scale_node = graph.nodes[scale];
    const ValueId gamma = scale_node.inputs[0] == out ? scale_node.inputs[1] : scale_node.inputs[0];
    if (gamma == out) continue;
    nodes.push_back(scale);
    out = scale_node.outputs[0];
    ValueId beta = kNoValue;
    const int shift = reader(out, "Add", 2);
    if (shift >= 0) {
      const Node& shift_node = graph.nodes[shift];
      beta = shift_node.inputs[0] == out ? shift_node.inputs[1] : shift_node.inputs[0];
      if (beta != out) {
        nodes.push_back(shift);
        out = shift_node.outputs[0];
      } else {
        beta = kNoValue;
      }
    }
    bool free = true;
    for (int k : nodes) free = free && !removed[k];
    if (!free) continue;
    Node fused;
    fused.name = graph.nodes[n].name;
    fused.op_type = "LayerNormalization";
    fused.opset = 17;
    fused.inputs = {x, gamma};
    if (beta != kNoValue) fused.inputs.push_back(beta);
    fused.outputs = {out};
    Attribute axis;
    axis.type = Attribute::Type::kInt;
    axis.i = -1;
    fused.attributes["axis"] = axis;
    Attribute epsilon;
    epsilon.type = Attribute::Type::kFloat;
    epsilon.f = *eps;
    fused.attributes["epsilon"] = epsilon;
    log.push_back(absl::StrCat(name(), ": ", nodes.size(), " nodes from ReduceMean '",
                               graph.nodes[n].name, "' -> LayerNormalization(epsilon=", *eps,
                               beta == kNoValue ? ", no bias)" : ")"));
    ReplaceNodes(graph, nodes, *std::max_element(nodes.begin(), nodes.end()), std::move(fused),
                 removed);
    changed = true;
  }
  if (changed) RemoveNodes(graph, removed);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
