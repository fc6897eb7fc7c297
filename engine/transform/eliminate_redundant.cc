#include "engine/transform/eliminate_redundant.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

bool SameTensor(const std::shared_ptr<const Tensor>& a, const std::shared_ptr<const Tensor>& b) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr || a->dtype() != b->dtype() || a->shape() != b->shape() ||
      a->dtype() == DataType::kString) {
    return false;
  }
  return std::memcmp(a->raw_data(), b->raw_data(), a->ByteSize()) == 0;
}

bool SameAttribute(const Attribute& a, const Attribute& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case Attribute::Type::kInt:
      return a.i == b.i;
    case Attribute::Type::kFloat:
      return std::memcmp(&a.f, &b.f, sizeof(float)) == 0;
    case Attribute::Type::kString:
      return a.s == b.s;
    case Attribute::Type::kInts:
      return a.ints == b.ints;
    case Attribute::Type::kFloats:
      return a.floats.size() == b.floats.size() &&
             std::memcmp(a.floats.data(), b.floats.data(), a.floats.size() * sizeof(float)) == 0;
    case Attribute::Type::kStrings:
      return a.strings == b.strings;
    case Attribute::Type::kTensor:
      return SameTensor(a.tensor, b.tensor);
    case Attribute::Type::kGraph:
    case Attribute::Type::kGraphs:
      return false;
  }
  return false;
}

// Whether `node` may stand in for a later copy of itself.
bool Mergeable(const Node& node) {
  if (node.fusion != nullptr || node.loop != nullptr || !node.implicit_inputs.empty() ||
      node.outputs.empty()) {
    return false;
  }
  const std::string& op = node.op_type;
  if (op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
      op == "RandomUniformLike" || op == "Multinomial" || op == "Bernoulli" || op == "Dropout") {
    return false;
  }
  for (ValueId v : node.outputs) {
    if (v == kNoValue) return false;
  }
  for (const auto& [name, attribute] : node.attributes) {
    if (attribute.type == Attribute::Type::kGraph || attribute.type == Attribute::Type::kGraphs) {
      return false;
    }
  }
  return true;
}

bool SameNode(const Node& a, const Node& b) {
  if (a.op_type != b.op_type || a.domain != b.domain || a.opset != b.opset ||
      a.inputs != b.inputs || a.outputs.size() != b.outputs.size() ||
      a.attributes.size() != b.attributes.size()) {
    return false;
  }
  for (const auto& [name, attribute] : a.attributes) {
    const Attribute* other = b.FindAttribute(name);
    if (other == nullptr || !SameAttribute(attribute, *other)) return false;
  }
  return true;
}

}  // namespace

absl::Status EliminateRedundantPass::Run(Graph& graph, const TransformContext& /*context*/,
                                         std::vector<std::string>& log) const {
  // Values whose id must survive: graph outputs and what subgraphs read.
  absl::flat_hash_set<ValueId> pinned(graph.outputs.begin(), graph.outputs.end());
  for (const Node& node : graph.nodes)
    pinned.insert(node.implicit_inputs.begin(), node.implicit_inputs.end());
  absl::flat_hash_map<ValueId, ValueId> replaced;  // dropped value -> the value standing for it
  const auto resolve = [&replaced](ValueId v) {
    auto it = replaced.find(v);
    return it == replaced.end() ? v : it->second;
  };
  // Earlier mergeable nodes by op type, for the CSE lookups.
  absl::flat_hash_map<std::string, std::vector<int>> seen;
  std::vector<bool> removed(graph.nodes.size(), false);
  bool changed = false;
  for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
    Node& node = graph.nodes[n];
    for (ValueId& v : node.inputs) {
      if (v != kNoValue) v = resolve(v);
    }
    const bool onnx = node.domain.empty() || node.domain == "ai.onnx";
    bool pinned_output = false;
    for (ValueId v : node.outputs)
      pinned_output = pinned_output || (v != kNoValue && pinned.contains(v));
    if (onnx && !pinned_output && node.fusion == nullptr) {
      bool pass_through = IsOp(node, "Identity", 1, 1);
      if (node.op_type == "Dropout" && node.outputs.size() == 1 && node.outputs[0] != kNoValue &&
          (node.inputs.size() < 3 || node.inputs[2] == kNoValue) && !node.inputs.empty() &&
          node.inputs[0] != kNoValue) {
        absl::StatusOr<int64_t> is_test = node.GetInt("is_test", 0);
        pass_through = node.opset >= 7 || (is_test.ok() && *is_test != 0);
      }
      if (pass_through) {
        replaced[node.outputs[0]] = node.inputs[0];
        removed[n] = true;
        changed = true;
        log.push_back(absl::StrCat(name(), ": ", node.Label(), " dropped"));
        continue;
      }
    }
    if (!Mergeable(node)) continue;
    std::vector<int>& candidates = seen[node.op_type];
    int match = -1;
    for (int earlier : candidates) {
      if (SameNode(graph.nodes[earlier], node)) {
        match = earlier;
        break;
      }
    }
    if (match < 0 || pinned_output) {
      candidates.push_back(n);
      continue;
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      replaced[node.outputs[i]] = graph.nodes[match].outputs[i];
    }
    removed[n] = true;
    changed = true;
    log.push_back(
        absl::StrCat(name(), ": ", node.Label(), " repeats '", graph.nodes[match].name, "'"));
  }
  if (changed) RemoveNodes(graph, removed);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
