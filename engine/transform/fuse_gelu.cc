#include "engine/transform/fuse_gelu.h"

#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

bool Near(std::optional<float> v, double want) {
  return v.has_value() && std::fabs(*v - want) <= 1e-4 * std::fabs(want);
}

// Matches the graph around one Erf or Tanh node. Returns the nodes of the pattern (in graph
// order is not required) and sets x and out, or returns empty.
class Matcher {
 public:
  Matcher(const Graph& graph, const ValueUses& uses, const std::vector<int>& producer,
          const TransformContext& context)
      : graph_(graph), uses_(uses), producer_(producer), context_(context) {}

  // The single reader of `v` when it is an ONNX `op` with two inputs, else -1.
  int Reader(ValueId v, const char* op) const {
    if (!uses_.Single(v)) return -1;
    const int c = uses_.consumer[v];
    return c >= 0 && IsOp(graph_.nodes[c], op, 2, 1) ? c : -1;
  }
  // The producer of `v` when it is `op` with `inputs` inputs and `v` has no other reader.
  int Producer(ValueId v, const char* op, size_t inputs) const {
    if (v == kNoValue || !uses_.Single(v)) return -1;
    const int p = producer_[v];
    return p >= 0 && IsOp(graph_.nodes[p], op, inputs, 1) ? p : -1;
  }
  // For a binary node, the operand that is not `v` (kNoValue when neither or both are v).
  static ValueId Other(const Node& node, ValueId v) {
    if (node.inputs[0] == v && node.inputs[1] != v) return node.inputs[1];
    if (node.inputs[1] == v && node.inputs[0] != v) return node.inputs[0];
    return kNoValue;
  }
  std::optional<float> Scalar(ValueId v) const { return ScalarConstant(context_, v); }

  // From the value `one_plus` = 1 + f(...), the tail Mul(Mul(x, one_plus), 0.5) (or
  // Mul(Mul(one_plus, x), 0.5), 0.5 on either side). Appends the two Muls and returns the output.
  ValueId Tail(ValueId one_plus, ValueId x, std::vector<int>& nodes) const {
    const int m1 = Reader(one_plus, "Mul");
    if (m1 < 0 || Other(graph_.nodes[m1], one_plus) != x) return kNoValue;
    const ValueId prod = graph_.nodes[m1].outputs[0];
    const int m2 = Reader(prod, "Mul");
    if (m2 < 0 || !Near(Scalar(Other(graph_.nodes[m2], prod)), 0.5)) return kNoValue;
    nodes.push_back(m1);
    nodes.push_back(m2);
    return graph_.nodes[m2].outputs[0];
  }

  // erf form around Erf node `e`.
  bool MatchErf(int e, ValueId& x, ValueId& out, std::vector<int>& nodes) const {
    const Node& erf = graph_.nodes[e];
    if (!IsOp(erf, "Erf", 1, 1)) return false;
    const ValueId scaled = erf.inputs[0];
    int d = Producer(scaled, "Div", 2);
    if (d >= 0) {
      if (!Near(Scalar(graph_.nodes[d].inputs[1]), std::sqrt(2.0))) return false;
      x = graph_.nodes[d].inputs[0];
    } else {
      d = Producer(scaled, "Mul", 2);
      if (d < 0) return false;
      const Node& mul = graph_.nodes[d];
      if (Near(Scalar(mul.inputs[1]), std::sqrt(0.5))) {
        x = mul.inputs[0];
      } else if (Near(Scalar(mul.inputs[0]), std::sqrt(0.5))) {
        x = mul.inputs[1];
      } else {
        return false;
      }
    }
    const int a = Reader(erf.outputs[0], "Add");
    if (a < 0 || !Near(Scalar(Other(graph_.nodes[a], erf.outputs[0])), 1.0)) return false;
    nodes = {d, e, a};
    out = Tail(graph_.nodes[a].outputs[0], x, nodes);
    return out != kNoValue;
  }

  // tanh form around Tanh node `t`.
  bool MatchTanh(int t, ValueId& x, ValueId& out, std::vector<int>& nodes) const {
    const Node& tanh = graph_.nodes[t];
    if (!IsOp(tanh, "Tanh", 1, 1)) return false;
    const int s = Producer(tanh.inputs[0], "Mul", 2);  // inner * sqrt(2/pi)
    if (s < 0) return false;
    const Node& scale = graph_.nodes[s];
    const double k = std::sqrt(2.0 / M_PI);
    ValueId inner = kNoValue;
    if (Near(Scalar(scale.inputs[1]), k)) {
      inner = scale.inputs[0];
    } else if (Near(Scalar(scale.inputs[0]), k)) {
      inner = scale.inputs[1];
    } else {
      return false;
    }
    const int add = Producer(inner, "Add", 2);  // x + 0.044715 x^3
    if (add < 0) return false;
    for (int side = 0; side < 2; ++side) {
      const ValueId cubic_term = graph_.nodes[add].inputs[side];
      const int c = Producer(cubic_term, "Mul", 2);
      if (c < 0) continue;
      const Node& cm = graph_.nodes[c];
      ValueId cube = kNoValue;
      if (Near(Scalar(cm.inputs[1]), 0.044715)) {
        cube = cm.inputs[0];
      } else if (Near(Scalar(cm.inputs[0]), 0.044715)) {
        cube = cm.inputs[1];
      } else {
        continue;
      }
      const int p = Producer(cube, "Pow", 2);
      if (p < 0 || !Near(Scalar(graph_.nodes[p].inputs[1]), 3.0)) continue;
      x = graph_.nodes[p].inputs[0];
      if (graph_.nodes[add].inputs[1 - side] != x) continue;
      const int a = Reader(tanh.outputs[0], "Add");
      if (a < 0 || !Near(Scalar(Other(graph_.nodes[a], tanh.outputs[0])), 1.0)) return false;
      nodes = {p, c, add, s, t, a};
      out = Tail(graph_.nodes[a].outputs[0], x, nodes);
      return out != kNoValue;
    }
    return false;
  }

 private:
  const Graph& graph_;
  const ValueUses& uses_;
  const std::vector<int>& producer_;
  const TransformContext& context_;
};

}  // namespace

absl::Status FuseGeluPass::Run(Graph& graph, const TransformContext& context,
                               std::vector<std::string>& log) const {
  const ValueUses uses(graph);
  std::vector<int> producer(graph.values.size(), -1);
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    for (ValueId v : graph.nodes[n].outputs) {
      if (v != kNoValue) producer[v] = n;
    }
  }
  const Matcher matcher(graph, uses, producer, context);
  std::vector<bool> removed(graph.nodes.size(), false);
  bool changed = false;
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    if (removed[n]) continue;
    ValueId x = kNoValue;
    ValueId out = kNoValue;
    std::vector<int> nodes;
    EltwiseFn fn;
    if (matcher.MatchErf(n, x, out, nodes)) {
      fn = EltwiseFn::kGeluErf;
    } else if (matcher.MatchTanh(n, x, out, nodes)) {
      fn = EltwiseFn::kGeluTanh;
    } else {
      continue;
    }
    bool free = true;
    for (int k : nodes) free = free && !removed[k];
    if (!free) continue;
    int last = nodes[0];
    for (int k : nodes) last = std::max(last, k);
    std::sort(nodes.begin(), nodes.end());
    Node fused;
    fused.name = graph.nodes[n].name;
    fused.op_type = kElementwiseOp;
    fused.opset = graph.nodes[n].opset;
    fused.inputs = {x};
    fused.outputs = {out};
    auto spec = std::make_shared<FusionSpec>();
    spec->post_ops = {PostOp::Unary(fn)};
    spec->unfused = ExtractSubgraph(graph, nodes, {x}, out);
    log.push_back(absl::StrCat(name(), ": ", nodes.size(), " nodes around '", graph.nodes[n].name,
                               "' -> ", EltwiseFnName(fn)));
    fused.fusion = std::move(spec);
    ReplaceNodes(graph, nodes, last, std::move(fused), removed);
    changed = true;
  }
  if (changed) RemoveNodes(graph, removed);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
