#include "engine/transform/hoist_loop_invariants.h"

#include <algorithm>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

bool Hoistable(const Node& node) {
  if (!(node.domain.empty() || node.domain == "ai.onnx") || node.fusion != nullptr ||
      node.loop != nullptr || !node.implicit_inputs.empty() || node.outputs.empty()) {
    return false;
  }
  const std::string& op = node.op_type;
  if (op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
      op == "RandomUniformLike" || op == "Multinomial" || op == "Bernoulli") {
    return false;
  }
  for (const auto& [name, attribute] : node.attributes) {
    if (attribute.type == Attribute::Type::kGraph || attribute.type == Attribute::Type::kGraphs) {
      return false;
    }
  }
  bool any_input = false;
  for (ValueId v : node.inputs) any_input = any_input || v != kNoValue;
  return any_input;
}

}  // namespace

absl::Status HoistLoopInvariantsPass::Run(Graph& graph, const TransformContext& /*context*/,
                                          std::vector<std::string>& log) const {
  RewriteLoops(graph, [&](Node& loop, Attribute& body_attribute, std::vector<Node>& nodes) {
    const Graph& source = *body_attribute.graph;
    // Invariant body values and the enclosing-graph value each stands for (kNoValue for a body
    // constant not yet copied out).
    absl::flat_hash_map<ValueId, ValueId> outer;
    absl::flat_hash_map<ValueId, std::shared_ptr<const Tensor>> body_constants;
    for (const Capture& c : source.captures) outer[c.inner] = c.outer;
    for (const auto& [id, tensor] : source.constants) {
      outer[id] = kNoValue;
      body_constants[id] = tensor;
    }
    const absl::flat_hash_set<ValueId> body_outputs(source.outputs.begin(), source.outputs.end());
    std::vector<int> hoisted;
    for (int n = 0; n < static_cast<int>(source.nodes.size()); ++n) {
      const Node& node = source.nodes[n];
      if (!Hoistable(node)) continue;
      bool invariant = true;
      for (ValueId v : node.inputs) invariant = invariant && (v == kNoValue || outer.contains(v));
      for (ValueId v : node.outputs) {
        invariant = invariant && v != kNoValue && !body_outputs.contains(v);
      }
      if (!invariant) continue;
      // Inputs in the enclosing graph: body constants are copied out once.
      Node moved = node;
      for (ValueId& v : moved.inputs) {
        if (v == kNoValue) continue;
        ValueId& o = outer[v];
        if (o == kNoValue) {
          o = graph.AddValue(absl::StrCat(source.ValueName(v), "/hoisted"), source.values[v].type);
          graph.constants.push_back({o, body_constants[v]});
        }
        v = o;
      }
      for (ValueId& v : moved.outputs) {
        const ValueId o =
            graph.AddValue(absl::StrCat(source.ValueName(v), "/hoisted"), source.values[v].type);
        outer[v] = o;
        v = o;
      }
      moved.name = absl::StrCat(loop.name, "/", node.name);
      nodes.push_back(std::move(moved));
      hoisted.push_back(n);
    }
    if (hoisted.empty()) {
      return;
    }
    auto body = std::make_shared<Graph>(source);
    std::vector<bool> removed(body->nodes.size(), false);
    std::string names;
    for (int n : hoisted) {
      removed[n] = true;
      for (ValueId v : body->nodes[n].outputs) {
        body->captures.push_back({v, outer[v]});
        loop.implicit_inputs.push_back(outer[v]);
      }
      absl::StrAppend(&names, names.empty() ? "" : ", ", body->nodes[n].op_type, " '",
                      body->nodes[n].name, "'");
    }
    RemoveNodes(*body, removed);
    log.push_back(absl::StrCat(name(), ": ", loop.Label(), ": ", hoisted.size(),
                               " invariant node(s) run once before the Loop: ", names));
    body_attribute.graph = std::move(body);
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
