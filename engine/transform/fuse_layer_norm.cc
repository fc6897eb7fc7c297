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

// A decomposed layer norm: the nodes it spans (ReduceMean, Sub, Pow or Mul, ReduceMean, Add, Sqrt,
// Div, the scale's Mul and perhaps the bias's Add) and the fused node's operands.
struct LayerNormMatch {
  std::vector<int> nodes;
  ValueId x = kNoValue;
  ValueId gamma = kNoValue;
  ValueId beta = kNoValue;  // kNoValue: no bias
  ValueId out = kNoValue;
  float epsilon = 0;
};

// Finds decomposed layer norms by their first ReduceMean. Reads the graph as it is when Match is
// called (the pass rewrites it between calls); the value uses and readers are those of the graph
// it was built on.
class LayerNormMatcher {
 public:
  LayerNormMatcher(const Graph& graph, const TransformContext& context)
      : graph_(graph), context_(context), uses_(graph), readers_(graph.values.size()) {
    for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
      for (ValueId v : graph.nodes[n].inputs) {
        if (v != kNoValue) readers_[v].push_back(n);
      }
    }
  }

  // The layer norm that starts at ReduceMean node `n`, or nullopt.
  std::optional<LayerNormMatch> Match(int n) const {
    if (!IsMeanOverLastAxis(graph_.nodes[n], context_)) return std::nullopt;
    LayerNormMatch m;
    m.x = graph_.nodes[n].inputs[0];
    const ValueId mean = graph_.nodes[n].outputs[0];
    const int sub = Reader(mean, "Sub", 2);
    if (sub < 0 || graph_.nodes[sub].inputs[0] != m.x || graph_.nodes[sub].inputs[1] != mean) {
      return std::nullopt;
    }
    const ValueId d = graph_.nodes[sub].outputs[0];
    // d is read twice (square, division) and by nothing else.
    if (uses_.count[d] != 2 || readers_[d].size() != 2) return std::nullopt;
    int square = -1, div = -1;
    for (int r : readers_[d]) {
      const Node& rn = graph_.nodes[r];
      if (IsOp(rn, "Pow", 2, 1) && rn.inputs[0] == d) {
        std::optional<float> e = ScalarConstant(context_, rn.inputs[1]);
        if (e.has_value() && *e == 2.0f) square = r;
      } else if (IsOp(rn, "Mul", 2, 1) && rn.inputs[0] == d && rn.inputs[1] == d) {
        square = r;
      } else if (IsOp(rn, "Div", 2, 1) && rn.inputs[0] == d) {
        div = r;
      }
    }
    if (square < 0 || div < 0) return std::nullopt;
    if (!MatchDenominator(square, div, m)) return std::nullopt;
    m.nodes.insert(m.nodes.begin(), {n, sub, square});
    m.nodes.push_back(div);
    if (!MatchScaleAndBias(div, m)) return std::nullopt;
    return m;
  }

 private:
  // The single reader of `v` if it is an `op` node with `inputs` inputs and one output, else -1.
  int Reader(ValueId v, const char* op, size_t inputs) const {
    if (!uses_.Single(v)) return -1;
    const int c = uses_.consumer[v];
    return c >= 0 && IsOp(graph_.nodes[c], op, inputs, 1) ? c : -1;
  }

  // Div's denominator: Sqrt(ReduceMean(square) + epsilon). Appends the variance's ReduceMean,
  // the Add and the Sqrt to m.nodes and sets m.epsilon.
  bool MatchDenominator(int square, int div, LayerNormMatch& m) const {
    if (!uses_.Single(graph_.nodes[square].outputs[0])) return false;
    const int var = uses_.consumer[graph_.nodes[square].outputs[0]];
    if (var < 0 || !IsMeanOverLastAxis(graph_.nodes[var], context_)) return false;
    const int add = Reader(graph_.nodes[var].outputs[0], "Add", 2);
    if (add < 0) return false;
    const Node& add_node = graph_.nodes[add];
    const ValueId var_value = graph_.nodes[var].outputs[0];
    std::optional<float> eps = ScalarConstant(
        context_, add_node.inputs[0] == var_value ? add_node.inputs[1] : add_node.inputs[0]);
    if (!eps.has_value() || *eps < 0) return false;
    const int sqrt = Reader(add_node.outputs[0], "Sqrt", 1);
    if (sqrt < 0 || graph_.nodes[div].inputs[1] != graph_.nodes[sqrt].outputs[0] ||
        !uses_.Single(graph_.nodes[sqrt].outputs[0])) {
      return false;
    }
    m.nodes.insert(m.nodes.end(), {var, add, sqrt});
    m.epsilon = *eps;
    return true;
  }

  // The Mul by gamma after the Div (LayerNormalization needs a scale), then perhaps an Add of
  // beta. Appends them to m.nodes and sets m.gamma, m.beta and m.out.
  bool MatchScaleAndBias(int div, LayerNormMatch& m) const {
    m.out = graph_.nodes[div].outputs[0];
    const int scale = Reader(m.out, "Mul", 2);
    if (scale < 0) return false;
    const Node& scale_node = graph_.nodes[scale];
    m.gamma = scale_node.inputs[0] == m.out ? scale_node.inputs[1] : scale_node.inputs[0];
    if (m.gamma == m.out) return false;
    m.nodes.push_back(scale);
    m.out = scale_node.outputs[0];
    const int shift = Reader(m.out, "Add", 2);
    if (shift >= 0) {
      const Node& shift_node = graph_.nodes[shift];
      const ValueId beta =
          shift_node.inputs[0] == m.out ? shift_node.inputs[1] : shift_node.inputs[0];
      if (beta != m.out) {
        m.beta = beta;
        m.nodes.push_back(shift);
        m.out = shift_node.outputs[0];
      }
    }
    return true;
  }

  const Graph& graph_;
  const TransformContext& context_;
  const ValueUses uses_;
  std::vector<std::vector<int>> readers_;  // per value: the nodes that read it
};

// The LayerNormalization node that replaces `m`, named after its first ReduceMean.
Node FusedLayerNorm(const LayerNormMatch& m, const std::string& name) {
  Node fused;
  fused.name = name;
  fused.op_type = "LayerNormalization";
  fused.opset = 17;
  fused.inputs = {m.x, m.gamma};
  if (m.beta != kNoValue) fused.inputs.push_back(m.beta);
  fused.outputs = {m.out};
  Attribute axis;
  axis.type = Attribute::Type::kInt;
  axis.i = -1;
  fused.attributes["axis"] = axis;
  Attribute epsilon;
  epsilon.type = Attribute::Type::kFloat;
  epsilon.f = m.epsilon;
  fused.attributes["epsilon"] = epsilon;
  return fused;
}

}  // namespace

absl::Status FuseLayerNormPass::Run(Graph& graph, const TransformContext& context,
                                    std::vector<std::string>& log) const {
  const LayerNormMatcher matcher(graph, context);
  std::vector<bool> removed(graph.nodes.size(), false);
  bool changed = false;
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    if (removed[n]) continue;
    std::optional<LayerNormMatch> m = matcher.Match(n);
    if (!m.has_value()) continue;
    bool free = true;
    for (int k : m->nodes) free = free && !removed[k];
    if (!free) continue;
    const std::string first = graph.nodes[n].name;
    log.push_back(absl::StrCat(name(), ": ", m->nodes.size(), " nodes from ReduceMean '", first,
                               "' -> LayerNormalization(epsilon=", m->epsilon,
                               m->beta == kNoValue ? ", no bias)" : ")"));
    ReplaceNodes(graph, m->nodes, *std::max_element(m->nodes.begin(), m->nodes.end()),
                 FusedLayerNorm(*m, first), removed);
    changed = true;
  }
  if (changed) RemoveNodes(graph, removed);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
