#include "engine/transform/graph_util.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace loopserve::engine::transform {

ValueUses::ValueUses(const Graph& graph)
    : count(graph.values.size(), 0), consumer(graph.values.size(), -1) {
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    for (ValueId v : graph.nodes[n].inputs) {
      if (v == kNoValue) continue;
      ++count[v];
      consumer[v] = n;
    }
    for (ValueId v : graph.nodes[n].implicit_inputs) count[v] += 2;
  }
  for (ValueId v : graph.outputs) count[v] += 2;
}

bool IsOp(const Node& node, const char* op_type, size_t inputs, size_t outputs) {
  if (node.op_type != op_type || !(node.domain.empty() || node.domain == "ai.onnx") ||
      node.inputs.size() != inputs || node.outputs.size() != outputs) {
    return false;
  }
  for (ValueId v : node.inputs) {
    if (v == kNoValue) return false;
  }
  for (ValueId v : node.outputs) {
    if (v == kNoValue) return false;
  }
  return true;
}

std::optional<float> ScalarConstant(const TransformContext& context, ValueId id) {
  if (id == kNoValue || !context.find_constant) return std::nullopt;
  const Tensor* t = context.find_constant(id);
  if (t == nullptr || t->dtype() != DataType::kFloat32 || t->NumElements() != 1) {
    return std::nullopt;
  }
  return t->data<float>()[0];
}

bool BroadcastsPerChannel(const Tensor& t, int64_t rank, int64_t channels) {
  const int64_t r = t.rank();
  if (t.NumElements() == 1) return r <= rank;
  if (t.NumElements() != channels || r > rank || r < rank - 1) return false;
  const int64_t axis = 1 - (rank - r);  // the result's axis 1 in t's dims
  for (int64_t i = 0; i < r; ++i) {
    if (t.dim(i) != (i == axis ? channels : 1)) return false;
  }
  return true;
}

void RemoveNodes(Graph& graph, const std::vector<bool>& removed) {
  std::vector<Node> kept;
  kept.reserve(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (!removed[n]) kept.push_back(std::move(graph.nodes[n]));
  }
  graph.nodes = std::move(kept);
}

Attribute* LoopBodyAttribute(Node& node) {
  if (node.op_type != "Loop" || node.loop == nullptr) return nullptr;
  auto it = node.attributes.find("body");
  if (it == node.attributes.end() || it->second.graph == nullptr) return nullptr;
  return &it->second;
}

void RewriteLoops(
    Graph& graph,
    absl::FunctionRef<void(Node& loop, Attribute& body, std::vector<Node>& nodes)> rewrite) {
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size());
  for (Node& node : graph.nodes) {
    if (Attribute* body = LoopBodyAttribute(node)) rewrite(node, *body, nodes);
    nodes.push_back(std::move(node));
  }
  graph.nodes = std::move(nodes);
}

void FuseEachNode(
    Graph& graph,
    absl::FunctionRef<bool(int n, const ValueUses& uses, std::vector<bool>& removed)> fuse) {
  const ValueUses uses(graph);
  std::vector<bool> removed(graph.nodes.size(), false);
  bool changed = false;
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    if (!removed[n] && fuse(n, uses, removed)) changed = true;
  }
  if (changed) RemoveNodes(graph, removed);
}

void ReplaceNodes(Graph& graph, const std::vector<int>& nodes, int last, Node fused,
                  std::vector<bool>& removed) {
  for (int k : nodes) removed[k] = true;
  removed[last] = false;
  graph.nodes[last] = std::move(fused);
}

std::string DescribeNodes(const Graph& graph, const std::vector<int>& nodes) {
  std::string names;
  for (int k : nodes) {
    absl::StrAppend(&names, names.empty() ? "" : " + ", graph.nodes[k].op_type, " '",
                    graph.nodes[k].name, "'");
  }
  return names;
}

std::shared_ptr<const Graph> ExtractSubgraph(const Graph& graph, const std::vector<int>& indices,
                                             const std::vector<ValueId>& inputs, ValueId output) {
  auto sub = std::make_shared<Graph>();
  sub->name = graph.name + "/unfused";
  absl::flat_hash_map<ValueId, ValueId> ids;
  auto map = [&](ValueId v) {
    if (v == kNoValue) return kNoValue;
    auto it = ids.find(v);
    if (it != ids.end()) return it->second;
    const ValueId inner = sub->AddValue(graph.values[v].name, graph.values[v].type);
    ids.emplace(v, inner);
    return inner;
  };
  // An omitted input keeps its position as a parameter nothing reads.
  for (ValueId v : inputs) sub->inputs.push_back(v == kNoValue ? sub->AddValue("") : map(v));
  for (int n : indices) {
    Node node = graph.nodes[n];
    for (ValueId& v : node.inputs) v = map(v);
    for (ValueId& v : node.outputs) v = map(v);
    sub->nodes.push_back(std::move(node));
  }
  sub->outputs.push_back(map(output));
  return sub;
}

}  // namespace loopserve::engine::transform
