#pragma once

// Reading an OpenVINO IR network (`<net>` or a Loop's `<body>`) from its pugixml DOM into plain,
// validated structures: layers with their ports, and for every input port the output port that
// feeds it. Nothing here knows the engine's op vocabulary; openvino_importer.cc and
// op_lowering.cc build the IR from these. The XML is untrusted: every id, port and attribute is
// checked, and every error names the layer ("layer 7 'add' (Add): ...").

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tensor/dtype.h"
#include "pugixml.hpp"

namespace loopserve::engine::openvino {

struct IrPort {
  int64_t id = -1;
  DataType dtype = DataType::kUndefined;  // from `precision`; undefined when absent
  std::vector<int64_t> dims;              // the <dim>s; -1 for a dynamic one ("?", "-1", "1..5")
  std::vector<std::string> names;         // tensor names from `names`, in file order
};

// One <layer>. Views into the pugixml document, which must outlive it.
struct IrLayer {
  int64_t id = -1;
  std::string name;
  std::string type;
  std::string version;
  pugi::xml_node node;  // the <layer> element
  pugi::xml_node data;  // its <data> child; empty when absent
  std::vector<IrPort> inputs;
  std::vector<IrPort> outputs;

  // "layer 7 'add' (Add)" for messages.
  std::string Label() const;
  // `code` error whose message starts with Label().
  absl::Status Error(absl::StatusCode code, absl::string_view message) const;
  absl::Status Invalid(absl::string_view message) const {
    return Error(absl::StatusCode::kInvalidArgument, message);
  }

  // <data> attributes. Missing ones take `def` (an error naming the attribute when there is no
  // default); malformed ones are InvalidArgument.
  absl::StatusOr<int64_t> IntAttr(const char* attr, std::optional<int64_t> def) const;
  absl::StatusOr<std::vector<int64_t>> IntsAttr(const char* attr,
                                                std::optional<std::vector<int64_t>> def) const;
  absl::StatusOr<float> FloatAttr(const char* attr, std::optional<float> def) const;
  // Comma-separated lists ("0.5,1", "sigmoid,tanh"); an empty value is an empty list.
  absl::StatusOr<std::vector<float>> FloatsAttr(const char* attr,
                                                std::optional<std::vector<float>> def) const;
  absl::StatusOr<std::vector<std::string>> StringsAttr(
      const char* attr, std::optional<std::vector<std::string>> def) const;
  absl::StatusOr<bool> BoolAttr(const char* attr, std::optional<bool> def) const;
  absl::StatusOr<std::string> StrAttr(const char* attr, std::optional<std::string> def) const;
  // Index of the input/output port with `port_id`, or -1.
  int InputIndex(int64_t port_id) const;
  int OutputIndex(int64_t port_id) const;
};

// Which output feeds an input port: (layer index, output port index); (-1, -1) when unconnected.
struct IrSource {
  int layer = -1;
  int port = -1;
};

struct IrNetwork {
  std::vector<IrLayer> layers;                    // in file order
  absl::flat_hash_map<int64_t, int> layer_index;  // layer id -> index into `layers`
  std::vector<std::vector<IrSource>> sources;     // [layer][input port]
};

// Parses the <layers> and <edges> of `net`. InvalidArgument on duplicate or malformed ids, edges
// naming missing layers or ports, an input port fed twice, or an edge joining ports of different
// precisions.
absl::StatusOr<IrNetwork> ParseNetwork(const pugi::xml_node& net);

// Element type from an IR `element_type` ("f32", "i64", "boolean", ...) or port `precision`
// ("FP32", "I64", "BOOL", ...). Unimplemented for types the engine does not store.
absl::StatusOr<DataType> ParseElementType(absl::string_view text);

// A `shape` attribute: "1,3,224", "" (a scalar), "?" / "-1" / "1..5" dims (dynamic), "[1,2]"
// brackets allowed; std::nullopt for a dynamic rank ("...").
absl::StatusOr<std::optional<std::vector<int64_t>>> ParseShape(absl::string_view text);

// An integer attribute of any element (port_map entries, back edges); `def` when missing.
absl::StatusOr<int64_t> ParseIntAttr(const pugi::xml_node& node, const char* attr,
                                     std::optional<int64_t> def);

// The name clients use for a port's tensor: the lexicographically smallest of its names (as
// OpenVINO's get_any_name picks), else "".
std::string TensorName(const IrPort& port);

}  // namespace loopserve::engine::openvino
