#include "engine/ir/graph.h"

#include <functional>
#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loopserve::engine {

const Attribute* Node::FindAttribute(const std::string& attr_name) const {
  auto it = attributes.find(attr_name);
  return it == attributes.end() ? nullptr : &it->second;
}

namespace {

absl::Status WrongType(const Node& node, const std::string& attr_name, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(node.Label(), ": attribute '", attr_name, "' is not ", want));
}

absl::Status Missing(const Node& node, const std::string& attr_name) {
  return absl::InvalidArgumentError(
      absl::StrCat(node.Label(), ": required attribute '", attr_name, "' is missing"));
}

}  // namespace

absl::StatusOr<int64_t> Node::GetInt(const std::string& attr_name,
                                     std::optional<int64_t> def) const {
  const Attribute* a = FindAttribute(attr_name);
  if (a == nullptr) {
    if (def.has_value()) return *def;
    return Missing(*this, attr_name);
  }
  if (a->type != Attribute::Type::kInt) return WrongType(*this, attr_name, "an int");
  return a->i;
}

absl::StatusOr<float> Node::GetFloat(const std::string& attr_name, std::optional<float> def) const {
  const Attribute* a = FindAttribute(attr_name);
  if (a == nullptr) {
    if (def.has_value()) return *def;
    return Missing(*this, attr_name);
  }
  if (a->type != Attribute::Type::kFloat) return WrongType(*this, attr_name, "a float");
  return a->f;
}

absl::StatusOr<std::string> Node::GetString(const std::string& attr_name,
                                            std::optional<std::string> def) const {
  const Attribute* a = FindAttribute(attr_name);
  if (a == nullptr) {
    if (def.has_value()) return *def;
    return Missing(*this, attr_name);
  }
  if (a->type != Attribute::Type::kString) return WrongType(*this, attr_name, "a string");
  return a->s;
}

absl::StatusOr<std::vector<int64_t>> Node::GetInts(const std::string& attr_name,
                                                   std::optional<std::vector<int64_t>> def) const {
  const Attribute* a = FindAttribute(attr_name);
  if (a == nullptr) {
    if (def.has_value()) return *def;
    return Missing(*this, attr_name);
  }
  if (a->type != Attribute::Type::kInts) return WrongType(*this, attr_name, "a list of ints");
  return a->ints;
}

std::shared_ptr<const Graph> Node::GetGraph(const std::string& attr_name) const {
  const Attribute* a = FindAttribute(attr_name);
  if (a == nullptr || a->type != Attribute::Type::kGraph) return nullptr;
  return a->graph;
}

std::string Node::Label() const { return absl::StrCat("node '", name, "' (", op_type, ")"); }

ValueId Graph::AddValue(std::string value_name, ValueType type) {
  values.push_back(ValueInfo{std::move(value_name), std::move(type)});
  return static_cast<ValueId>(values.size() - 1);
}

namespace {

// A string value, constant or string-making Cast anywhere in `graph` or its subgraphs.
bool MentionsStrings(const Graph& graph) {
  for (const ValueInfo& v : graph.values) {
    if (v.type.dtype == DataType::kString) return true;
  }
  for (const auto& [id, tensor] : graph.constants) {
    if (tensor->dtype() == DataType::kString) return true;
  }
  for (const Node& node : graph.nodes) {
    for (const auto& [name, attr] : node.attributes) {
      if (attr.tensor != nullptr && attr.tensor->dtype() == DataType::kString) return true;
      if (attr.graph != nullptr && MentionsStrings(*attr.graph)) return true;
      for (const auto& g : attr.graphs) {
        if (MentionsStrings(*g)) return true;
      }
    }
    if (node.op_type == "Cast" && node.domain.empty()) {
      const Attribute* to = node.FindAttribute("to");
      if (to != nullptr &&
          ((to->type == Attribute::Type::kInt && to->i == DataTypeToOnnx(DataType::kString)) ||
           (to->type == Attribute::Type::kString && to->s == "STRING"))) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

bool GraphMayHoldStrings(const Graph& graph) {
  // A model input whose element type is not declared takes whatever the caller sends. (Subgraph
  // inputs only receive what the enclosing graph hands them.)
  for (ValueId v : graph.inputs) {
    if (graph.values[v].type.dtype == DataType::kUndefined) return true;
  }
  return MentionsStrings(graph);
}

absl::Status SortTopologically(Graph& graph) {
  const size_t num_values = graph.values.size();
  std::vector<bool> available(num_values, false);
  for (ValueId v : graph.inputs) available[v] = true;
  for (const auto& [v, t] : graph.constants) available[v] = true;
  for (const Capture& c : graph.captures) available[c.inner] = true;

  std::vector<int> producer(num_values, -1);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (ValueId v : graph.nodes[n].outputs) {
      if (v == kNoValue) continue;
      if (available[v] || producer[v] != -1) {
        return absl::InvalidArgumentError(absl::StrCat(graph.nodes[n].Label(), ": value '",
                                                       graph.values[v].name, "' is defined twice"));
      }
      producer[v] = static_cast<int>(n);
    }
  }

  // Kahn's algorithm, taking ready nodes in their original order.
  std::vector<int> missing(graph.nodes.size(), 0);
  std::vector<std::vector<int>> consumers(num_values);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    std::vector<ValueId> dependencies = graph.nodes[n].inputs;
    dependencies.insert(dependencies.end(), graph.nodes[n].implicit_inputs.begin(),
                        graph.nodes[n].implicit_inputs.end());
    for (ValueId v : dependencies) {
      if (v == kNoValue || available[v]) continue;
      if (producer[v] == -1) {
        return absl::InvalidArgumentError(absl::StrCat(graph.nodes[n].Label(), ": input '",
                                                       graph.values[v].name,
                                                       "' is not produced by any node"));
      }
      ++missing[n];
      consumers[v].push_back(static_cast<int>(n));
    }
  }
  // Smallest index first keeps an already sorted graph unchanged.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (missing[n] == 0) ready.push(static_cast<int>(n));
  }
  std::vector<int> order;
  order.reserve(graph.nodes.size());
  while (!ready.empty()) {
    const int n = ready.top();
    ready.pop();
    order.push_back(n);
    for (ValueId v : graph.nodes[n].outputs) {
      if (v == kNoValue) continue;
      for (int c : consumers[v]) {
        if (--missing[c] == 0) ready.push(c);
      }
    }
  }
  if (order.size() != graph.nodes.size()) {
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
      if (missing[n] > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(graph.nodes[n].Label(), ": the graph has a cycle through this node"));
      }
    }
  }
  std::vector<Node> sorted;
  sorted.reserve(order.size());
  for (int n : order) sorted.push_back(std::move(graph.nodes[n]));
  graph.nodes = std::move(sorted);
  for (ValueId v : graph.outputs) {
    if (v != kNoValue && !available[v] && producer[v] == -1) {
      return absl::InvalidArgumentError(absl::StrCat("graph '", graph.name, "': output '",
                                                     graph.values[v].name, "' is never produced"));
    }
  }
  return absl::OkStatus();
}

}  // namespace loopserve::engine
