#include "engine/transform/fuse_conv.h"

#include <algorithm>
#include <optional>

#include "engine/transform/chain.h"

namespace loopserve::engine::transform {
namespace {

bool IsScalar(const TransformContext& context, ValueId id, float value) {
  const std::optional<float> v = ScalarConstant(context, id);
  return v.has_value() && *v == value;
}

// The nodes of x * Clip(x + 3, 0, 6) / 6 reading `x` (Add, Clip, Mul, Div in graph order), when
// x's readers are exactly that Add and Mul and the intermediate values have no other reader.
std::optional<std::vector<int>> MatchHardSwish(const Graph& graph, const ValueUses& uses,
                                               const std::vector<bool>& removed,
                                               const TransformContext& context, ValueId x) {
  if (uses.count[x] != 2) return std::nullopt;
  int add = -1, mul = -1;
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    if (removed[n]) continue;
    const Node& node = graph.nodes[n];
    if (std::find(node.inputs.begin(), node.inputs.end(), x) == node.inputs.end()) continue;
    if (IsOp(node, "Add", 2, 1) && node.opset >= 7) {
      const ValueId other = node.inputs[0] == x ? node.inputs[1] : node.inputs[0];
      if (add >= 0 || !IsScalar(context, other, 3.0f)) return std::nullopt;
      add = n;
    } else if (IsOp(node, "Mul", 2, 1) && node.opset >= 7 && node.inputs[0] != node.inputs[1]) {
      if (mul >= 0) return std::nullopt;
      mul = n;
    } else {
      return std::nullopt;
    }
  }
  if (add < 0 || mul < 0) return std::nullopt;
  const ValueId sum = graph.nodes[add].outputs[0];
  if (!uses.Single(sum)) return std::nullopt;
  const int clip = uses.consumer[sum];
  if (clip < 0 || removed[clip]) return std::nullopt;
  const Node& c = graph.nodes[clip];
  if (c.op_type != "Clip" || c.outputs.size() != 1 || c.inputs.empty() || c.inputs[0] != sum) {
    return std::nullopt;
  }
  if (c.opset >= 11) {
    if (c.inputs.size() != 3 || !IsScalar(context, c.inputs[1], 0.0f) ||
        !IsScalar(context, c.inputs[2], 6.0f)) {
      return std::nullopt;
    }
  } else {
    absl::StatusOr<float> lo = c.GetFloat("min", -1.0f), hi = c.GetFloat("max", -1.0f);
    if (!lo.ok() || !hi.ok() || *lo != 0.0f || *hi != 6.0f) return std::nullopt;
  }
  const ValueId clipped = c.outputs[0];
  const Node& m = graph.nodes[mul];
  if (!uses.Single(clipped) || uses.consumer[clipped] != mul ||
      (m.inputs[0] != clipped && m.inputs[1] != clipped)) {
    return std::nullopt;
  }
  const ValueId product = m.outputs[0];
  if (!uses.Single(product)) return std::nullopt;
  const int div = uses.consumer[product];
  if (div < 0 || removed[div]) return std::nullopt;
  const Node& d = graph.nodes[div];
  if (!IsOp(d, "Div", 2, 1) || d.opset < 7 || d.inputs[0] != product ||
      !IsScalar(context, d.inputs[1], 6.0f)) {
    return std::nullopt;
  }
  std::vector<int> nodes = {add, clip, mul, div};
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

// Whether absorbing `reader` of the Conv result `value` keeps the result's shape: unary ops do;
// a binary op only when its other operand is a constant that broadcasts per channel (the Conv's
// result shape is unknown here, and a larger operand would make the fused node fall back to the
// unfused nodes on every run). `weights` (may be null) gives the result's rank and channels.
bool KeepsShape(const Node& reader, ValueId value, const Tensor* weights,
                const TransformContext& context) {
  if (reader.inputs.size() != 2 || reader.inputs[0] == kNoValue || reader.inputs[1] == kNoValue) {
    return true;
  }
  const std::string& op = reader.op_type;
  if (op != "Add" && op != "Sub" && op != "Mul" && op != "Div" && op != "Max" && op != "Min") {
    return true;
  }
  if (reader.inputs[0] == value && reader.inputs[1] == value) return true;
  const ValueId other = reader.inputs[0] == value ? reader.inputs[1] : reader.inputs[0];
  const Tensor* c = context.find_constant ? context.find_constant(other) : nullptr;
  if (c == nullptr) return false;
  if (weights == nullptr || weights->rank() < 3) return c->NumElements() == 1 && c->rank() <= 1;
  return BroadcastsPerChannel(*c, weights->rank(), weights->dim(0));
}

}  // namespace

absl::Status FuseConvPass::Run(Graph& graph, const TransformContext& context,
                               std::vector<std::string>& log) const {
  FuseEachNode(graph, [&](int n, const ValueUses& uses, std::vector<bool>& removed) {
    const Node& node = graph.nodes[n];
    if (node.op_type != "Conv" || !(node.domain.empty() || node.domain == "ai.onnx") ||
        node.fusion != nullptr || node.inputs.size() < 2 || node.inputs.size() > 3 ||
        node.outputs.size() != 1 || node.outputs[0] == kNoValue) {
      return false;
    }
    ChainBuilder chain;
    chain.inputs = node.inputs;
    chain.inputs.resize(3, kNoValue);  // the post-ops' operands start at input 3
    chain.value = node.outputs[0];
    chain.nodes = {n};
    const Tensor* weights = context.find_constant ? context.find_constant(node.inputs[1]) : nullptr;
    while (true) {
      if (std::optional<std::vector<int>> hs =
              MatchHardSwish(graph, uses, removed, context, chain.value)) {
        chain.post_ops.push_back(PostOp::Unary(EltwiseFn::kHardSwish));
        chain.nodes.insert(chain.nodes.end(), hs->begin(), hs->end());
        chain.value = graph.nodes[hs->back()].outputs[0];
        continue;
      }
      if (!uses.Single(chain.value)) break;
      const int next = uses.consumer[chain.value];
      if (next < 0 || removed[next] ||
          !KeepsShape(graph.nodes[next], chain.value, weights, context) ||
          !chain.Absorb(graph, next, context)) {
        break;
      }
    }
    if (chain.post_ops.empty()) return false;
    chain.Replace(graph, node, std::make_shared<FusionSpec>(), name(), log, removed);
    return true;
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
