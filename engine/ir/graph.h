#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/ir/fusion.h"
#include "engine/ir/loop_spec.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/value.h"

namespace loopserve::engine {

// The engine's intermediate representation: a flat graph whose values and nodes are addressed by
// integer ids. Importers (ONNX, OpenVINO IR) translate into it; nothing after import knows the
// source format. A Graph owns its subgraphs (Loop bodies, If branches) through node attributes.
// Graphs are built once at load and then only read.

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;  // an omitted optional input or output

struct ValueInfo {
  std::string name;
  ValueType type;
};

class Graph;

// A node attribute. Exactly the member matching `type` is meaningful.
struct Attribute {
  enum class Type : uint8_t {
    kInt,
    kFloat,
    kString,
    kInts,
    kFloats,
    kStrings,
    kTensor,
    kGraph,
    kGraphs
  };
  Type type = Type::kInt;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<const Tensor> tensor;
  std::shared_ptr<const Graph> graph;
  std::vector<std::shared_ptr<const Graph>> graphs;
};

struct Node {
  std::string name;              // may be empty in the source; importers fill in "<op>_<index>"
  std::string op_type;           // ONNX op names where the semantics match
  std::string domain;            // "" for the default ONNX domain
  int opset = 0;                 // opset version of `domain` the node was written against
  std::vector<ValueId> inputs;   // kNoValue for an omitted optional input
  std::vector<ValueId> outputs;  // kNoValue for an omitted optional output
  // Values of this graph that the node's subgraphs read (their Captures' `outer`): not operands,
  // but the node must run after their producers.
  std::vector<ValueId> implicit_inputs;
  absl::flat_hash_map<std::string, Attribute> attributes;
  // Set for op_type "Loop": the port map; the body is attributes["body"].graph.
  std::shared_ptr<const LoopSpec> loop;
  // Set for the fused ops engine/transform makes (kFusedMatMulOp, kElementwiseOp, a Gemm with an
  // activation): their post-ops and transposes (engine/ir/fusion.h).
  std::shared_ptr<const FusionSpec> fusion;

  const Attribute* FindAttribute(const std::string& name) const;
  // Typed getters with defaults; InvalidArgument when present with another type.
  absl::StatusOr<int64_t> GetInt(const std::string& name, std::optional<int64_t> def) const;
  absl::StatusOr<float> GetFloat(const std::string& name, std::optional<float> def) const;
  absl::StatusOr<std::string> GetString(const std::string& name,
                                        std::optional<std::string> def) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(const std::string& name,
                                               std::optional<std::vector<int64_t>> def) const;
  std::shared_ptr<const Graph> GetGraph(const std::string& name) const;

  // "node 'loop_1' (Loop)" for messages.
  std::string Label() const;
};

// A value of the enclosing graph that a subgraph reads by name. The subgraph has its own value
// `inner` standing for the parent's `outer`; the executor binds it (without a copy) before running
// the subgraph. A value from two scopes up is captured by each graph in between.
struct Capture {
  ValueId inner = kNoValue;
  ValueId outer = kNoValue;
};

class Graph {
 public:
  std::string name;
  std::vector<ValueInfo> values;  // indexed by ValueId
  std::vector<Node> nodes;        // in topological order after import
  std::vector<ValueId> inputs;    // graph (or body) parameters, in order
  std::vector<ValueId> outputs;   // graph (or body) results, in order
  // Constant values (initializers, Constant nodes), owned by the graph.
  std::vector<std::pair<ValueId, std::shared_ptr<const Tensor>>> constants;
  std::vector<Capture> captures;  // only for subgraphs

  ValueId AddValue(std::string value_name, ValueType type = {});
  const std::string& ValueName(ValueId id) const { return values[id].name; }
};

// Whether a model with this graph can hold string tensors: an input's element type is not
// declared, a value or constant (also in an attribute, or in a subgraph) is a string, or a Cast
// makes strings. Strings arise nowhere else.
bool GraphMayHoldStrings(const Graph& graph);

// Orders `graph.nodes` topologically (stable: nodes already in order keep it). InvalidArgument
// naming a node when a value is used but never produced, or on a cycle.
absl::Status SortTopologically(Graph& graph);

}  // namespace loopserve::engine
