#include "engine/transform/chain.h"

#include <cfloat>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loopserve::engine::transform {
namespace {

struct UnaryMatch {
  EltwiseFn fn;
  float alpha = 0.0f;
  float beta = 0.0f;
};

// A one-input ONNX activation as a typed function (attributes read with their ONNX defaults).
std::optional<UnaryMatch> MatchUnary(const Node& node, const TransformContext& context) {
  if (!(node.domain.empty() || node.domain == "ai.onnx") || node.outputs.size() != 1 ||
      node.outputs[0] == kNoValue || node.inputs.empty() || node.inputs[0] == kNoValue) {
    return std::nullopt;
  }
  const std::string& op = node.op_type;
  if (node.inputs.size() == 1) {
    // The table's one-input functions without attributes (engine/ir/eltwise_fn.h).
    EltwiseFn fn;
    if (EltwiseFnOfOp(op.c_str(), kEltwiseFuse, &fn)) return UnaryMatch{fn};
    auto attr = [&](const char* name, float def) -> std::optional<float> {
      absl::StatusOr<float> v = node.GetFloat(name, def);
      return v.ok() ? std::optional<float>(*v) : std::nullopt;
    };
    if (op == "LeakyRelu") {
      if (auto a = attr("alpha", 0.01f)) return UnaryMatch{EltwiseFn::kLeakyRelu, *a};
    } else if (op == "Elu") {
      if (auto a = attr("alpha", 1.0f)) return UnaryMatch{EltwiseFn::kElu, *a};
    } else if (op == "HardSigmoid") {
      auto a = attr("alpha", 0.2f);
      auto b = attr("beta", 0.5f);
      if (a && b) return UnaryMatch{EltwiseFn::kHardSigmoid, *a, *b};
    } else if (op == "Clip" && node.opset < 11) {
      auto lo = attr("min", -FLT_MAX);
      auto hi = attr("max", FLT_MAX);
      if (lo && hi) return UnaryMatch{EltwiseFn::kClip, *lo, *hi};
    }
    if (op == "Clip" && node.opset >= 11) return UnaryMatch{EltwiseFn::kClip, -FLT_MAX, FLT_MAX};
    return std::nullopt;
  }
  if (op == "Clip" && node.opset >= 11 && node.inputs.size() <= 3) {
    float bounds[2] = {-FLT_MAX, FLT_MAX};
    for (size_t i = 1; i < node.inputs.size(); ++i) {
      if (node.inputs[i] == kNoValue) continue;
      std::optional<float> v = ScalarConstant(context, node.inputs[i]);
      if (!v.has_value()) return std::nullopt;
      bounds[i - 1] = *v;
    }
    return UnaryMatch{EltwiseFn::kClip, bounds[0], bounds[1]};
  }
  if (op == "Pow" && node.opset >= 7 && node.inputs.size() == 2 && node.inputs[1] != kNoValue) {
    if (std::optional<float> e = ScalarConstant(context, node.inputs[1])) {
      return UnaryMatch{EltwiseFn::kPow, *e};
    }
  }
  return std::nullopt;
}

std::optional<ArithOp> MatchBinary(const Node& node) {
  if (!(node.domain.empty() || node.domain == "ai.onnx") || node.inputs.size() != 2 ||
      node.outputs.size() != 1 || node.inputs[0] == kNoValue || node.inputs[1] == kNoValue ||
      node.outputs[0] == kNoValue) {
    return std::nullopt;
  }
  // Numpy broadcasting from opset 7 (Max and Min: 8).
  ArithOp op;
  if (!ArithOpOfOp(node.op_type.c_str(), kEltwiseFuse, &op)) return std::nullopt;
  const int min_opset = op == ArithOp::kMax || op == ArithOp::kMin ? 8 : 7;
  if (node.opset >= min_opset) return op;
  return std::nullopt;
}

}  // namespace

bool IsFusableElementwise(const Node& node, const TransformContext& context) {
  if (node.op_type == kElementwiseOp && node.fusion != nullptr) return true;
  return MatchUnary(node, context).has_value() || MatchBinary(node).has_value();
}

int ChainBuilder::InputIndex(ValueId v) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == v) return static_cast<int>(i);
  }
  if (static_cast<int>(inputs.size()) >= kMaxInputs) return -1;
  inputs.push_back(v);
  return static_cast<int>(inputs.size()) - 1;
}

bool ChainBuilder::Absorb(const Graph& graph, int n, const TransformContext& context) {
  const Node& node = graph.nodes[n];
  if (node.op_type == kElementwiseOp && node.fusion != nullptr) {
    if (node.inputs.empty() || node.inputs[0] != value || node.fusion->trans_a ||
        node.fusion->trans_b) {
      return false;
    }
    // Its inputs 1.. become ours; input 0 is our value (a post-op reading input 0 reads the
    // value as it was before the node, which is no longer available: refuse).
    std::vector<int> remap(node.inputs.size(), -1);
    const std::vector<ValueId> saved = inputs;
    for (size_t i = 1; i < node.inputs.size(); ++i) {
      if (node.inputs[i] == value) {
        inputs = saved;
        return false;
      }
      remap[i] = InputIndex(node.inputs[i]);
      if (remap[i] < 0) {
        inputs = saved;
        return false;
      }
    }
    for (const PostOp& p : node.fusion->post_ops) {
      if (p.kind == PostOp::Kind::kBinary && p.input == 0) {
        inputs = saved;
        return false;
      }
    }
    for (PostOp p : node.fusion->post_ops) {
      if (p.kind == PostOp::Kind::kBinary) p.input = remap[p.input];
      post_ops.push_back(p);
    }
    nodes.push_back(n);
    value = node.outputs[0];
    return true;
  }
  if (std::optional<UnaryMatch> u = MatchUnary(node, context)) {
    if (node.inputs[0] != value) return false;
    post_ops.push_back(PostOp::Unary(u->fn, u->alpha, u->beta));
    nodes.push_back(n);
    value = node.outputs[0];
    return true;
  }
  std::optional<ArithOp> op = MatchBinary(node);
  if (!op.has_value()) return false;
  const bool first = node.inputs[0] == value;
  const bool second = node.inputs[1] == value;
  if (first && second) {
    if (*op == ArithOp::kMul) {
      post_ops.push_back(PostOp::Unary(EltwiseFn::kPow, 2.0f));
    } else if (*op == ArithOp::kAdd) {
      post_ops.push_back(PostOp::Unary(EltwiseFn::kLinear, 2.0f, 0.0f));
    } else {
      return false;
    }
  } else if (first || second) {
    const int index = InputIndex(node.inputs[first ? 1 : 0]);
    if (index < 0) return false;
    post_ops.push_back(PostOp::Binary(*op, index, /*input_first=*/second));
  } else {
    return false;
  }
  nodes.push_back(n);
  value = node.outputs[0];
  return true;
}

void ChainBuilder::Grow(const Graph& graph, const ValueUses& uses, const std::vector<bool>& removed,
                        const TransformContext& context) {
  while (uses.Single(value)) {
    const int next = uses.consumer[value];
    if (next < 0 || removed[next] || !Absorb(graph, next, context)) return;
  }
}

void ChainBuilder::Replace(Graph& graph, Node fused, std::shared_ptr<FusionSpec> spec,
                           absl::string_view pass, std::vector<std::string>& log,
                           std::vector<bool>& removed) const {
  fused.inputs = inputs;
  fused.outputs = {value};
  spec->post_ops = post_ops;
  spec->unfused = ExtractSubgraph(graph, nodes, inputs, value);
  log.push_back(absl::StrCat(pass, ": ", DescribeNodes(graph, nodes), " -> ", fused.op_type, " [",
                             DescribeFusion(fused.op_type, *spec), "]"));
  fused.fusion = std::move(spec);
  ReplaceNodes(graph, nodes, nodes.back(), std::move(fused), removed);
}

}  // namespace loopserve::engine::transform
