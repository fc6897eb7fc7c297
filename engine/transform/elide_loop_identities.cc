#include "engine/transform/elide_loop_identities.h"

#include "absl/strings/str_cat.h"

namespace loopserve::engine::transform {
namespace {

using InputKind = LoopSpec::InputPort::Kind;
using OutputKind = LoopSpec::OutputPort::Kind;

// The rewritten body, or `body` itself when nothing applies; `elided` counts the Identities.
std::shared_ptr<const Graph> ElideIdentities(std::shared_ptr<const Graph> body,
                                             const LoopSpec& spec, int& elided) {
  const Graph& g = *body;
  const int num_results = static_cast<int>(g.outputs.size());
  std::vector<int> port_refs(num_results, 0);
  auto ref = [&](int r) {
    if (r >= 0 && r < num_results) ++port_refs[r];
  };
  ref(spec.condition_result);
  for (const LoopSpec::InputPort& in : spec.inputs) {
    if (in.kind == InputKind::kCarried) ref(in.back_edge);
  }
  for (const LoopSpec::OutputPort& out : spec.outputs) ref(out.body_result);
  std::vector<int> value_uses(g.values.size(), 0);
  for (const Node& n : g.nodes) {
    for (ValueId v : n.inputs) {
      if (v != kNoValue) ++value_uses[v];
    }
    for (ValueId v : n.implicit_inputs) ++value_uses[v];
  }
  for (ValueId v : g.outputs) ++value_uses[v];

  std::vector<bool> dropped(g.nodes.size(), false);
  std::vector<ValueId> outputs = g.outputs;
  bool changed = false;
  // Drops the Identity node that makes result `r` and has the result read `source` instead.
  auto elide = [&](int r, ValueId source) {
    const ValueId y = g.outputs[r];
    if (value_uses[y] != 1) return;
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      const Node& node = g.nodes[n];
      if (!dropped[n] && node.op_type == "Identity" && node.domain.empty() &&
          node.inputs.size() == 1 && node.outputs.size() == 1 && node.outputs[0] == y &&
          node.inputs[0] != kNoValue && (source == kNoValue || node.inputs[0] == source)) {
        outputs[r] = node.inputs[0];
        dropped[n] = true;
        changed = true;
        ++elided;
        return;
      }
    }
  };
  // A carried value passed through unchanged (the ONNX condition `cond_out = Identity(cond_in)`):
  // the result becomes the parameter and the Loop skips its hand-over.
  for (const LoopSpec::InputPort& in : spec.inputs) {
    if (in.kind != InputKind::kCarried || in.back_edge < 0 || in.back_edge >= num_results ||
        in.body_param < 0 || in.body_param >= static_cast<int>(g.inputs.size())) {
      continue;
    }
    elide(in.back_edge, g.inputs[in.body_param]);
  }
  for (const LoopSpec::OutputPort& out : spec.outputs) {
    const int r = out.body_result;
    if (out.kind == OutputKind::kLastValue || r < 0 || r >= num_results || port_refs[r] != 1) {
      continue;
    }
    elide(r, kNoValue);
  }
  if (!changed) return body;
  auto rewritten = std::make_shared<Graph>(g);
  rewritten->outputs = std::move(outputs);
  rewritten->nodes.clear();
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (!dropped[n]) rewritten->nodes.push_back(g.nodes[n]);
  }
  return rewritten;
}

}  // namespace

absl::Status ElideLoopIdentitiesPass::Run(Graph& graph, const TransformContext& context,
                                          std::vector<std::string>& log) const {
  for (Node& node : graph.nodes) {
    if (node.op_type != "Loop" || node.loop == nullptr) continue;
    auto it = node.attributes.find("body");
    if (it == node.attributes.end() || it->second.graph == nullptr) continue;
    int elided = 0;
    std::shared_ptr<const Graph> body = ElideIdentities(it->second.graph, *node.loop, elided);
    if (elided == 0) continue;
    it->second.graph = std::move(body);
    log.push_back(absl::StrCat(name(), ": ", node.Label(), ": ", elided,
                               " Identity node(s) of the body elided"));
  }
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
