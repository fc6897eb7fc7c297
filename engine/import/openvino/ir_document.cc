#include "engine/import/openvino/ir_document.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/base/status_macros.h"

namespace loopserve::engine::openvino {
namespace {

// Longest attribute text quoted back in a message; hostile files may carry megabytes.
constexpr size_t kMaxQuoted = 64;

std::string Quote(absl::string_view text) {
  if (text.size() > kMaxQuoted) return absl::StrCat("'", text.substr(0, kMaxQuoted), "...'");
  return absl::StrCat("'", text, "'");
}

bool ParseInt(absl::string_view text, int64_t* out) {
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), out);
}

// One dim of a port or shape: a non-negative integer, or a dynamic one ("?", "-1", "a..b").
absl::StatusOr<int64_t> ParseDim(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text == "?" || text == "-1" || absl::StrContains(text, "..")) return -1;
  int64_t d = 0;
  if (!ParseInt(text, &d) || d < 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad dimension ", Quote(text)));
  }
  return d;
}

// Splits a `names` attribute on unescaped commas ("a\,b" is one name "a,b").
std::vector<std::string> SplitNames(absl::string_view text) {
  std::vector<std::string> names;
  std::string current;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == ',') {
      current.push_back(',');
      ++i;
    } else if (text[i] == ',') {
      names.push_back(std::string(absl::StripAsciiWhitespace(current)));
      current.clear();
    } else {
      current.push_back(text[i]);
    }
  }
  names.push_back(std::string(absl::StripAsciiWhitespace(current)));
  names.erase(std::remove(names.begin(), names.end(), std::string()), names.end());
  return names;
}

absl::StatusOr<IrPort> ParsePort(const pugi::xml_node& node) {
  IrPort port;
  LS_ASSIGN_OR_RETURN(port.id, ParseIntAttr(node, "id", std::nullopt));
  if (port.id < 0)
    return absl::InvalidArgumentError(absl::StrCat("port id ", port.id, " is negative"));
  if (pugi::xml_attribute p = node.attribute("precision"); !p.empty()) {
    absl::StatusOr<DataType> dtype = ParseElementType(p.value());
    if (!dtype.ok()) return Annotate(dtype.status(), absl::StrCat("port ", port.id, ": "));
    port.dtype = *dtype;
  }
  for (pugi::xml_node dim = node.child("dim"); dim; dim = dim.next_sibling("dim")) {
    absl::StatusOr<int64_t> d = ParseDim(dim.text().get());
    if (!d.ok()) return Annotate(d.status(), absl::StrCat("port ", port.id, ": "));
    port.dims.push_back(*d);
  }
  if (pugi::xml_attribute n = node.attribute("names"); !n.empty()) {
    port.names = SplitNames(n.value());
  }
  return port;
}

absl::Status ParsePorts(const pugi::xml_node& parent, std::vector<IrPort>& ports,
                        std::vector<int64_t>& seen_ids) {
  if (!parent) return absl::OkStatus();
  for (pugi::xml_node p = parent.child("port"); p; p = p.next_sibling("port")) {
    LS_ASSIGN_OR_RETURN(IrPort port, ParsePort(p));
    if (std::find(seen_ids.begin(), seen_ids.end(), port.id) != seen_ids.end()) {
      return absl::InvalidArgumentError(absl::StrCat("port id ", port.id, " is used twice"));
    }
    seen_ids.push_back(port.id);
    ports.push_back(std::move(port));
  }
  return absl::OkStatus();
}

}  // namespace

std::string IrLayer::Label() const {
  return absl::StrCat("layer ", id, " '", name, "' (", type, ")");
}

absl::Status IrLayer::Error(absl::StatusCode code, absl::string_view message) const {
  return absl::Status(code, absl::StrCat(Label(), ": ", message));
}

absl::StatusOr<std::string> IrLayer::StrAttr(const char* attr,
                                             std::optional<std::string> def) const {
  pugi::xml_attribute a = data.attribute(attr);
  if (a.empty()) {
    if (def.has_value()) return *def;
    return Invalid(absl::StrCat("attribute '", attr, "' is required"));
  }
  return std::string(a.value());
}

absl::StatusOr<int64_t> IrLayer::IntAttr(const char* attr, std::optional<int64_t> def) const {
  pugi::xml_attribute a = data.attribute(attr);
  if (a.empty()) {
    if (def.has_value()) return *def;
    return Invalid(absl::StrCat("attribute '", attr, "' is required"));
  }
  int64_t v = 0;
  if (!ParseInt(a.value(), &v)) {
    return Invalid(
        absl::StrCat("attribute '", attr, "' = ", Quote(a.value()), " is not an integer"));
  }
  return v;
}

absl::StatusOr<std::vector<int64_t>> IrLayer::IntsAttr(
    const char* attr, std::optional<std::vector<int64_t>> def) const {
  pugi::xml_attribute a = data.attribute(attr);
  if (a.empty()) {
    if (def.has_value()) return *def;
    return Invalid(absl::StrCat("attribute '", attr, "' is required"));
  }
  std::vector<int64_t> values;
  absl::string_view text = absl::StripAsciiWhitespace(a.value());
  if (text.empty()) return values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!ParseInt(part, &v)) {
      return Invalid(absl::StrCat("attribute '", attr, "' = ", Quote(a.value()),
                                  " is not a list of integers"));
    }
    values.push_back(v);
  }
  return values;
}

absl::StatusOr<float> IrLayer::FloatAttr(const char* attr, std::optional<float> def) const {
  pugi::xml_attribute a = data.attribute(attr);
  if (a.empty()) {
    if (def.has_value()) return *def;
    return Invalid(absl::StrCat("attribute '", attr, "' is required"));
  }
  float v = 0;
  if (!absl::SimpleAtof(absl::StripAsciiWhitespace(a.value()), &v)) {
    return Invalid(absl::StrCat("attribute '", attr, "' = ", Quote(a.value()), " is not a number"));
  }
  return v;
}

absl::StatusOr<std::vector<float>> IrLayer::FloatsAttr(
    const char* attr, std::optional<std::vector<float>> def) const {
  pugi::xml_attribute a = data.attribute(attr);
  if (a.empty()) {
    if (def.has_value()) return *def;
    return Invalid(absl::StrCat("attribute '", attr, "' is required"));
  }
  std::vector<float> values;
  absl::string_view text = absl::StripAsciiWhitespace(a.value());
  if (text.empty()) return values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    float v = 0;
    if (!absl::SimpleAtof(absl::StripAsciiWhitespace(part), &v)) {
      return Invalid(
          absl::StrCat("attribute '", attr, "' = ", Quote(a.value()), " is not a list of numbers"));
    }
    values.push_back(v);
  }
  return values;
}

absl::StatusOr<std::vector<std::string>> IrLayer::StringsAttr(
    const char* attr, std::optional<std::vector<std::string>> def) const {
  pugi::xml_attribute a = data.attribute(attr);
  if (a.empty()) {
    if (def.has_value()) return *def;
    return Invalid(absl::StrCat("attribute '", attr, "' is required"));
  }
  std::vector<std::string> values;
  absl::string_view text = absl::StripAsciiWhitespace(a.value());
  if (text.empty()) return values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    values.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return values;
}

absl::StatusOr<bool> IrLayer::BoolAttr(const char* attr, std::optional<bool> def) const {
  pugi::xml_attribute a = data.attribute(attr);
  if (a.empty()) {
    if (def.has_value()) return *def;
    return Invalid(absl::StrCat("attribute '", attr, "' is required"));
  }
  const std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(a.value()));
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  return Invalid(absl::StrCat("attribute '", attr, "' = ", Quote(a.value()), " is not a boolean"));
}

int IrLayer::InputIndex(int64_t port_id) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].id == port_id) return static_cast<int>(i);
  }
  return -1;
}

int IrLayer::OutputIndex(int64_t port_id) const {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].id == port_id) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<int64_t> ParseIntAttr(const pugi::xml_node& node, const char* attr,
                                     std::optional<int64_t> def) {
  pugi::xml_attribute a = node.attribute(attr);
  if (a.empty()) {
    if (def.has_value()) return *def;
    return absl::InvalidArgumentError(
        absl::StrCat("<", node.name(), "> has no attribute '", attr, "'"));
  }
  int64_t v = 0;
  if (!ParseInt(a.value(), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("<", node.name(), "> attribute '", attr,
                                                   "' = ", Quote(a.value()), " is not an integer"));
  }
  return v;
}

absl::StatusOr<DataType> ParseElementType(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "f32" || t == "fp32") return DataType::kFloat32;
  if (t == "f64" || t == "fp64") return DataType::kFloat64;
  if (t == "f16" || t == "fp16") return DataType::kFloat16;
  if (t == "bf16") return DataType::kBFloat16;
  if (t == "i8") return DataType::kInt8;
  if (t == "u8") return DataType::kUint8;
  if (t == "i16") return DataType::kInt16;
  if (t == "u16") return DataType::kUint16;
  if (t == "i32") return DataType::kInt32;
  if (t == "u32") return DataType::kUint32;
  if (t == "i64") return DataType::kInt64;
  if (t == "u64") return DataType::kUint64;
  if (t == "boolean" || t == "bool") return DataType::kBool;
  if (t == "dynamic" || t == "undefined" || t == "unspecified") return DataType::kUndefined;
  return absl::UnimplementedError(absl::StrCat("element type ", Quote(text), " is not supported"));
}

absl::StatusOr<std::optional<std::vector<int64_t>>> ParseShape(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text == "...") return std::optional<std::vector<int64_t>>();
  if (absl::ConsumePrefix(&text, "[") && !absl::ConsumeSuffix(&text, "]")) {
    return absl::InvalidArgumentError(absl::StrCat("bad shape ", Quote(text)));
  }
  std::vector<int64_t> dims;
  if (absl::StripAsciiWhitespace(text).empty()) return std::optional<std::vector<int64_t>>(dims);
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    absl::StatusOr<int64_t> d = ParseDim(part);
    if (!d.ok()) return Annotate(d.status(), "shape: ");
    dims.push_back(*d);
  }
  return std::optional<std::vector<int64_t>>(std::move(dims));
}

std::string TensorName(const IrPort& port) {
  if (port.names.empty()) return std::string();
  return *std::min_element(port.names.begin(), port.names.end());
}

absl::StatusOr<IrNetwork> ParseNetwork(const pugi::xml_node& net) {
  IrNetwork out;
  pugi::xml_node layers = net.child("layers");
  if (!layers)
    return absl::InvalidArgumentError(absl::StrCat("<", net.name(), "> has no <layers>"));
  for (pugi::xml_node node = layers.child("layer"); node; node = node.next_sibling("layer")) {
    IrLayer layer;
    layer.node = node;
    layer.data = node.child("data");
    layer.name = node.attribute("name").value();
    layer.type = node.attribute("type").value();
    layer.version = node.attribute("version").value();
    absl::StatusOr<int64_t> id = ParseIntAttr(node, "id", std::nullopt);
    if (!id.ok()) {
      return Annotate(id.status(), absl::StrCat("layer '", layer.name, "' (", layer.type, "): "));
    }
    layer.id = *id;
    if (layer.id < 0) return layer.Invalid("the layer id is negative");
    if (layer.type.empty()) return layer.Invalid("the layer has no type");
    if (out.layer_index.contains(layer.id)) {
      const IrLayer& first = out.layers[out.layer_index[layer.id]];
      return layer.Invalid(absl::StrCat("layer id ", layer.id, " is also used by ", first.Label()));
    }
    std::vector<int64_t> port_ids;
    absl::Status status = ParsePorts(node.child("input"), layer.inputs, port_ids);
    if (status.ok()) status = ParsePorts(node.child("output"), layer.outputs, port_ids);
    if (!status.ok()) return Annotate(status, absl::StrCat(layer.Label(), ": "));
    out.layer_index[layer.id] = static_cast<int>(out.layers.size());
    out.layers.push_back(std::move(layer));
  }
  out.sources.resize(out.layers.size());
  for (size_t i = 0; i < out.layers.size(); ++i) {
    out.sources[i].resize(out.layers[i].inputs.size());
  }
  pugi::xml_node edges = net.child("edges");
  for (pugi::xml_node e = edges.child("edge"); e; e = e.next_sibling("edge")) {
    LS_ASSIGN_OR_RETURN(int64_t from_layer, ParseIntAttr(e, "from-layer", std::nullopt));
    LS_ASSIGN_OR_RETURN(int64_t from_port, ParseIntAttr(e, "from-port", std::nullopt));
    LS_ASSIGN_OR_RETURN(int64_t to_layer, ParseIntAttr(e, "to-layer", std::nullopt));
    LS_ASSIGN_OR_RETURN(int64_t to_port, ParseIntAttr(e, "to-port", std::nullopt));
    const std::string edge =
        absl::StrCat("edge ", from_layer, ":", from_port, " -> ", to_layer, ":", to_port);
    auto from_it = out.layer_index.find(from_layer);
    auto to_it = out.layer_index.find(to_layer);
    if (from_it == out.layer_index.end() || to_it == out.layer_index.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(edge, ": layer ", from_it == out.layer_index.end() ? from_layer : to_layer,
                       " does not exist"));
    }
    const IrLayer& src = out.layers[from_it->second];
    const IrLayer& dst = out.layers[to_it->second];
    const int out_index = src.OutputIndex(from_port);
    if (out_index < 0) {
      return src.Invalid(absl::StrCat(edge, ": the layer has no output port ", from_port));
    }
    const int in_index = dst.InputIndex(to_port);
    if (in_index < 0) {
      return dst.Invalid(absl::StrCat(edge, ": the layer has no input port ", to_port));
    }
    IrSource& source = out.sources[to_it->second][in_index];
    if (source.layer >= 0) {
      return dst.Invalid(absl::StrCat(edge, ": input port ", to_port, " is already fed by layer ",
                                      out.layers[source.layer].id));
    }
    const DataType a = src.outputs[out_index].dtype;
    const DataType b = dst.inputs[in_index].dtype;
    if (a != DataType::kUndefined && b != DataType::kUndefined && a != b) {
      return dst.Invalid(absl::StrCat(edge, ": input port ", to_port, " has precision ",
                                      DataTypeName(b), " but ", src.Label(), " produces ",
                                      DataTypeName(a)));
    }
    source.layer = from_it->second;
    source.port = out_index;
  }
  return out;
}

}  // namespace loopserve::engine::openvino
