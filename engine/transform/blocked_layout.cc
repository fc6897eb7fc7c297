#include "engine/transform/blocked_layout.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/kernels/dnnl/layout.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

bool IsOnnx(const Node& node) { return node.domain.empty() || node.domain == "ai.onnx"; }

bool IsScalarFloatConstant(const TransformContext& context, ValueId id) {
  const Tensor* t = context.find_constant ? context.find_constant(id) : nullptr;
  return t != nullptr && t->dtype() == DataType::kFloat32 && t->NumElements() == 1 &&
         t->rank() <= 4;
}

// For a Conv that can touch blocked values: its input and output channels (C_in, M); else
// {0, 0}. Constant float32 weights [M, C / group, kH, kW]; post-op operands one-element.
std::pair<int64_t, int64_t> ConvChannels(const Node& node, const TransformContext& context) {
  if (node.op_type != "Conv" || !IsOnnx(node) || node.inputs.size() < 2 ||
      node.outputs.size() != 1 || node.inputs[0] == kNoValue || !context.find_constant) {
    return {0, 0};
  }
  const Tensor* w = context.find_constant(node.inputs[1]);
  if (w == nullptr || w->dtype() != DataType::kFloat32 || w->rank() != 4) return {0, 0};
  for (size_t i = 3; i < node.inputs.size(); ++i) {
    if (!IsScalarFloatConstant(context, node.inputs[i])) return {0, 0};
  }
  if (node.inputs.size() > 2 && node.inputs[2] != kNoValue &&
      context.find_constant(node.inputs[2]) == nullptr) {
    return {0, 0};
  }
  const Attribute* group = node.FindAttribute("group");
  const int64_t groups = group != nullptr && group->type == Attribute::Type::kInt ? group->i : 1;
  if (groups < 1) return {0, 0};
  return {w->dim(1) * groups, w->dim(0)};
}

bool IsLayoutFreeOp(const Node& node) {
  static const absl::flat_hash_set<std::string>* const kOps = new absl::flat_hash_set<std::string>{
      "Relu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu",         "Clip",
      "Add",  "Sub",     "Mul",  "Div",         "Max",       "Min",       kElementwiseOp};
  return IsOnnx(node) && node.outputs.size() == 1 && kOps->contains(node.op_type) &&
         (node.opset >= 7 || node.op_type == kElementwiseOp);
}

bool IsGlobalPool(const Node& node) {
  return (node.op_type == "GlobalAveragePool" || node.op_type == "GlobalMaxPool") && IsOnnx(node) &&
         node.inputs.size() == 1 && node.inputs[0] != kNoValue && node.outputs.size() == 1 &&
         node.outputs[0] != kNoValue;
}

bool IsChannelConcat(const Node& node) {
  if (node.op_type != "Concat" || !IsOnnx(node) || node.outputs.size() != 1) return false;
  const Attribute* axis = node.FindAttribute("axis");
  return axis != nullptr && axis->type == Attribute::Type::kInt && (axis->i == 1 || axis->i == -3);
}

// What the pass decided for one graph.
struct Plan {
  std::vector<int64_t> channels;  // per value: C of a value that can be blocked, else 0
  std::vector<bool> blocked;      // per value: kept blocked
  std::vector<bool> in_chain;     // per node: an elementwise op or Concat over blocked values
  std::vector<int64_t> conv_in;   // per node: a usable Conv's C_in (0 otherwise)
};

// Whether node `n` reads input slot `slot` in the blocked layout when the value there is
// blockable.
bool ReadsBlocked(const Plan& plan, int n, size_t slot) {
  return plan.in_chain[n] || (slot == 0 && plan.conv_in[n] > 0);
}

// Whether plain `v` can join a chain through a `_PlainToBlocked` node: in the nhwc layout a
// float32 tensor of any rank up to 4 can (nhwc is a permutation of the dims, so numpy broadcasting
// of the permuted shapes is the plain one's); its rank must be known: declared, or a Resize of a
// value that could be blocked (4-D), as a feature pyramid's upsampled branch is.
bool Convertible(const Graph& graph, const Plan& plan, const std::vector<int>& producer,
                 ValueId v) {
  if (v == kNoValue || ActivationLayout() != ChainLayout::kNhwc) return false;
  const ValueType& type = graph.values[v].type;
  if (type.dims.has_value() && type.dims->size() <= 4 && type.dtype == DataType::kFloat32) {
    return true;
  }
  if (producer[v] < 0) return false;
  const Node& node = graph.nodes[producer[v]];
  return node.op_type == "Resize" && IsOnnx(node) && !node.inputs.empty() &&
         node.inputs[0] != kNoValue && plan.channels[node.inputs[0]] > 0;
}

Plan Decide(const Graph& graph, const TransformContext& context) {
  std::vector<int> producer(graph.values.size(), -1);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (ValueId v : graph.nodes[n].outputs) {
      if (v != kNoValue) producer[v] = static_cast<int>(n);
    }
  }
  Plan plan;
  plan.channels.assign(graph.values.size(), 0);
  plan.blocked.assign(graph.values.size(), false);
  plan.in_chain.assign(graph.nodes.size(), false);
  plan.conv_in.assign(graph.nodes.size(), 0);
  // Forward: which values could be blocked.
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    const auto [c_in, m] = ConvChannels(node, context);
    if (m > 0) {
      if (c_in % ChainChannelMultiple() == 0) plan.conv_in[n] = c_in;
      if (m % ChainChannelMultiple() == 0) plan.channels[node.outputs[0]] = m;
      continue;
    }
    if (IsGlobalPool(node)) {
      const int64_t c = plan.channels[node.inputs[0]];
      if (c > 0) {
        plan.in_chain[n] = true;
        plan.channels[node.outputs[0]] = c;
      }
      continue;
    }
    const bool layout_free = IsLayoutFreeOp(node);
    if (!layout_free && !IsChannelConcat(node)) continue;
    int64_t channels = 0;
    bool ok = !node.inputs.empty();
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      const int64_t c = plan.channels[v];
      if (c > 0 && layout_free && channels > 0 && c != channels) ok = false;
      if (c > 0) {
        channels = layout_free ? c : channels + c;
      } else if (!layout_free ||
                 (!IsScalarFloatConstant(context, v) && !Convertible(graph, plan, producer, v))) {
        ok = false;
      }
    }
    if (ok && channels > 0 && node.outputs[0] != kNoValue) {
      plan.in_chain[n] = true;
      plan.channels[node.outputs[0]] = channels;
    }
  }
  // An in-chain node needs every input blocked; a Conv's blocked result needs a blocked reader.
  std::vector<bool> has_blocked_reader(graph.values.size(), false);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v != kNoValue && plan.channels[v] > 0 && ReadsBlocked(plan, static_cast<int>(n), i)) {
        has_blocked_reader[v] = true;
      }
    }
  }
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    if (node.outputs.empty() || node.outputs[0] == kNoValue) continue;
    const ValueId out = node.outputs[0];
    if (plan.channels[out] > 0 && (plan.in_chain[n] || has_blocked_reader[out])) {
      plan.blocked[out] = true;
    }
  }
  return plan;
}

// Whether a Conv's kernel would run it on the plain layouts without a reorder (a pointwise Conv:
// one GEMM per image; dnnl/conv.cc) when it is not in a chain.
bool IsPointwise(const Node& node, const TransformContext& context) {
  const Tensor* w = context.find_constant(node.inputs[1]);
  const Attribute* group = node.FindAttribute("group");
  if (w->dim(2) != 1 || w->dim(3) != 1 || (group != nullptr && group->i != 1)) return false;
  for (const char* name : {"strides", "pads"}) {
    const Attribute* a = node.FindAttribute(name);
    if (a == nullptr) continue;
    for (int64_t v : a->ints) {
      if (v != (name[0] == 's' ? 1 : 0)) return false;
    }
  }
  return true;
}

int Find(std::vector<int>& parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

// Unblocks each chain (nodes connected through blocked values) that would reorder as often as the
// Convs would on their own: outside a chain a Conv reorders its input and its result (2), a
// pointwise one neither; in a chain, each Conv input or result that stays plain and each plain
// reader's `_BlockedToPlain` is one reorder.
void DropUnprofitableChains(const Graph& graph, const TransformContext& context,
                            const std::vector<bool>& plain_reader, Plan& plan) {
  const int nodes = static_cast<int>(graph.nodes.size());
  std::vector<int> producer(graph.values.size(), -1);
  std::vector<int> parent(nodes);
  for (int n = 0; n < nodes; ++n) {
    parent[n] = n;
    for (ValueId v : graph.nodes[n].outputs) {
      if (v != kNoValue) producer[v] = n;
    }
  }
  for (int n = 0; n < nodes; ++n) {
    const Node& node = graph.nodes[n];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v != kNoValue && plan.blocked[v] && ReadsBlocked(plan, n, i)) {
        parent[Find(parent, n)] = Find(parent, producer[v]);
      }
    }
  }
  std::vector<int> alone(nodes, 0), chained(nodes, 0);
  std::vector<bool> touches(nodes, false);
  for (int n = 0; n < nodes; ++n) {
    const Node& node = graph.nodes[n];
    const bool is_conv = ConvChannels(node, context).second > 0;
    const bool src = plan.conv_in[n] > 0 && plan.blocked[node.inputs[0]];
    const ValueId out = node.outputs.empty() ? kNoValue : node.outputs[0];
    const bool dst = out != kNoValue && plan.blocked[out];
    if (!src && !dst && !plan.in_chain[n]) continue;
    const int root = Find(parent, n);
    touches[root] = true;
    if (is_conv) {
      alone[root] += IsPointwise(node, context) ? 0 : 2;
      chained[root] += (src ? 0 : 1) + (dst ? 0 : 1);
    }
    if (dst && plain_reader[out]) ++chained[root];
    if (plan.in_chain[n]) {
      for (ValueId v : node.inputs) {
        if (v != kNoValue && !plan.blocked[v] && !IsScalarFloatConstant(context, v)) {
          ++chained[root];  // a _PlainToBlocked
        }
      }
    }
  }
  for (int n = 0; n < nodes; ++n) {
    const int root = Find(parent, n);
    if (!touches[root] || chained[root] < alone[root]) continue;
    plan.in_chain[n] = false;
    for (ValueId v : graph.nodes[n].outputs) {
      if (v != kNoValue) plan.blocked[v] = false;
    }
  }
}

// Readers that need a blocked value plain: other ops, subgraph captures, the graph's outputs.
std::vector<bool> PlainReaders(const Graph& graph, const Plan& plan) {
  std::vector<bool> plain_reader(graph.values.size(), false);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v != kNoValue && plan.blocked[v] && !ReadsBlocked(plan, static_cast<int>(n), i)) {
        plain_reader[v] = true;
      }
    }
    for (ValueId v : node.implicit_inputs) {
      if (v != kNoValue && plan.blocked[v]) plain_reader[v] = true;
    }
  }
  for (ValueId v : graph.outputs) {
    if (v != kNoValue && plan.blocked[v]) plain_reader[v] = true;
  }
  return plain_reader;
}

Attribute IntAttribute(int64_t value) {
  Attribute a;
  a.type = Attribute::Type::kInt;
  a.i = value;
  return a;
}

}  // namespace

absl::Status BlockedLayoutPass::Run(Graph& graph, const TransformContext& context,
                                    std::vector<std::string>& log) const {
  if (ActivationLayout() == ChainLayout::kPlain) return absl::OkStatus();
  Plan plan = Decide(graph, context);
  DropUnprofitableChains(graph, context, PlainReaders(graph, plan), plan);
  bool any = false;
  for (bool b : plan.blocked) any = any || b;
  if (!any) return absl::OkStatus();
  const std::vector<bool> plain_reader = PlainReaders(graph, plan);

  std::vector<ValueId> blocked_id(graph.values.size(), kNoValue);
  std::vector<ValueId> converted_id(graph.values.size(), kNoValue);
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size());
  int chain_nodes = 0, entries = 0, exits = 0, to_plain = 0, to_blocked = 0;
  std::string names;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    Node node = graph.nodes[n];
    bool touched = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v != kNoValue && plan.blocked[v] && ReadsBlocked(plan, static_cast<int>(n), i)) {
        node.inputs[i] = blocked_id[v];
        touched = true;
      } else if (v != kNoValue && plan.in_chain[n] && !IsScalarFloatConstant(context, v)) {
        // A plain operand the decision found convertible: reordered in once, before its first
        // chain reader.
        if (converted_id[v] == kNoValue) {
          converted_id[v] = graph.AddValue(absl::StrCat(graph.ValueName(v), "/blocked"));
          Node reorder;
          reorder.op_type = kPlainToBlockedOp;
          reorder.name = absl::StrCat(graph.ValueName(v), "/to_blocked");
          reorder.opset = 1;
          reorder.inputs = {v};
          reorder.outputs = {converted_id[v]};
          nodes.push_back(std::move(reorder));
          ++to_blocked;
        }
        node.inputs[i] = converted_id[v];
      }
    }
    const bool is_conv = plan.conv_in[n] > 0 || ConvChannels(node, context).second > 0;
    const ValueId out = node.outputs.empty() ? kNoValue : node.outputs[0];
    const bool out_blocked = out != kNoValue && plan.blocked[out];
    if (is_conv && (touched || out_blocked)) {
      node.attributes["_blocked_src"] = IntAttribute(touched ? 1 : 0);
      node.attributes["_blocked_dst"] = IntAttribute(out_blocked ? 1 : 0);
      entries += touched ? 0 : 1;
      exits += out_blocked ? 0 : 1;
    }
    if (plan.in_chain[n] && IsGlobalPool(node)) node.attributes["_blocked"] = IntAttribute(1);
    if (plan.in_chain[n] && node.op_type == "Concat") {
      node.attributes["axis"] = IntAttribute(ChainConcatAxis());
    }
    if (out_blocked) {
      blocked_id[out] = graph.AddValue(absl::StrCat(graph.ValueName(out), "/blocked"));
      node.outputs[0] = blocked_id[out];
    }
    if (touched || out_blocked) {
      ++chain_nodes;
      if (chain_nodes <= 4) {
        absl::StrAppend(&names, names.empty() ? "" : ", ", node.op_type, " '", node.name, "'");
      }
    }
    nodes.push_back(std::move(node));
    if (out_blocked && plain_reader[out]) {
      Node reorder;
      reorder.op_type = kBlockedToPlainOp;
      reorder.name = absl::StrCat(graph.ValueName(out), "/to_plain");
      reorder.opset = 1;
      reorder.inputs = {blocked_id[out]};
      reorder.outputs = {out};
      nodes.push_back(std::move(reorder));
      ++to_plain;
    }
  }
  graph.nodes = std::move(nodes);
  log.push_back(absl::StrCat(
      "blocked_layout: ", chain_nodes, " nodes keep ", ChainLayoutName(ActivationLayout()),
      " tensors (", names, chain_nodes > 4 ? ", ..." : "", "); reorders: ", entries,
      " Conv inputs in, ", exits, " Conv results out, ", to_plain, " ", kBlockedToPlainOp, " and ",
      to_blocked, " ", kPlainToBlockedOp, " nodes"));
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
