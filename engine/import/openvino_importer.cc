#include "engine/import/openvino_importer.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/import/openvino/ir_document.h"
#include "engine/import/openvino/op_lowering.h"
#include "pugixml.hpp"

namespace loopserve::engine {
namespace {

using openvino::ConstantMap;
using openvino::IrLayer;
using openvino::IrNetwork;
using openvino::IrPort;
using openvino::LayerValues;
using openvino::ParseIntAttr;

// Nesting limit for Loop bodies: deep enough for real models, shallow enough for the stack.
constexpr int kMaxBodyDepth = 16;

ValueType PortType(const IrPort& port) {
  ValueType type;
  type.dtype = port.dtype;
  type.dims = port.dims;
  return type;
}

bool KnownRankAtMost1(const ValueType& type) {
  return !type.dims.has_value() || type.dims->size() <= 1;
}

// Where the Parameters and Results of one network landed in its Graph.
struct NetworkIo {
  absl::flat_hash_map<int64_t, int> params;   // layer id -> index into graph.inputs
  absl::flat_hash_map<int64_t, int> results;  // layer id -> index into graph.outputs
  std::vector<std::string> param_labels;      // per graph input: the Parameter's Label()
  std::vector<std::string> result_labels;     // per graph output: the Result's Label()
};

class OpenVinoImporter {
 public:
  explicit OpenVinoImporter(absl::string_view weights) : weights_(weights) {}

  absl::Status ImportNetwork(const pugi::xml_node& xml, int depth, Graph& graph, NetworkIo& io) {
    LS_ASSIGN_OR_RETURN(IrNetwork net, openvino::ParseNetwork(xml));
    // Every output port is a value, defined up front so layers may come in any order.
    std::vector<std::vector<ValueId>> produced(net.layers.size());
    for (size_t i = 0; i < net.layers.size(); ++i) {
      const IrLayer& layer = net.layers[i];
      for (size_t k = 0; k < layer.outputs.size(); ++k) {
        const IrPort& port = layer.outputs[k];
        std::string name = openvino::TensorName(port);
        if (name.empty()) {
          name = layer.outputs.size() == 1 ? layer.name : absl::StrCat(layer.name, ".", port.id);
        }
        ValueType type = PortType(port);
        if (layer.type == "Parameter") {
          LS_ASSIGN_OR_RETURN(type, ParameterType(layer, type));
        }
        produced[i].push_back(graph.AddValue(std::move(name), std::move(type)));
      }
    }
    ConstantMap constants;
    for (size_t i = 0; i < net.layers.size(); ++i) {
      const IrLayer& layer = net.layers[i];
      LayerValues values;
      for (const openvino::IrSource& source : net.sources[i]) {
        values.inputs.push_back(source.layer < 0 ? kNoValue : produced[source.layer][source.port]);
      }
      values.outputs = produced[i];
      if (layer.type == "Parameter") {
        LS_RETURN_IF_ERROR(CheckPorts(layer, values, 0, 1));
        io.params[layer.id] = static_cast<int>(graph.inputs.size());
        io.param_labels.push_back(layer.Label());
        graph.inputs.push_back(values.outputs[0]);
      } else if (layer.type == "Const") {
        LS_RETURN_IF_ERROR(CheckPorts(layer, values, 0, 1));
        LS_ASSIGN_OR_RETURN(std::shared_ptr<const Tensor> tensor, ReadConst(layer));
        graph.constants.emplace_back(values.outputs[0], tensor);
        constants[values.outputs[0]] = std::move(tensor);
      } else if (layer.type == "Result") {
        LS_RETURN_IF_ERROR(CheckPorts(layer, values, 1, 0));
        io.results[layer.id] = static_cast<int>(graph.outputs.size());
        io.result_labels.push_back(layer.Label());
        graph.outputs.push_back(values.inputs[0]);
      } else if (layer.type == "Loop" || layer.type == "TensorIterator") {
        LS_RETURN_IF_ERROR(LowerLoop(layer, values, depth, graph));
      } else {
        LS_RETURN_IF_ERROR(openvino::LowerLayer(layer, values, constants, graph));
      }
    }
    openvino::FoldWeightDecompression(graph);
    return SortTopologically(graph);
  }

 private:
  static absl::Status CheckPorts(const IrLayer& layer, const LayerValues& values, int inputs,
                                 int outputs) {
    if (static_cast<int>(layer.inputs.size()) != inputs ||
        static_cast<int>(layer.outputs.size()) != outputs) {
      return layer.Invalid(absl::StrCat("has ", layer.inputs.size(), " input and ",
                                        layer.outputs.size(), " output ports, expected ", inputs,
                                        " and ", outputs));
    }
    for (int i = 0; i < inputs; ++i) {
      if (values.inputs[i] == kNoValue) {
        return layer.Invalid(absl::StrCat("input port ", layer.inputs[i].id, " is not connected"));
      }
    }
    return absl::OkStatus();
  }

  // A Parameter's declared type: element_type and shape, checked against its output port.
  static absl::StatusOr<ValueType> ParameterType(const IrLayer& layer, ValueType port_type) {
    ValueType type = port_type;
    LS_ASSIGN_OR_RETURN(std::string element_type, layer.StrAttr("element_type", ""));
    if (!element_type.empty()) {
      absl::StatusOr<DataType> dtype = openvino::ParseElementType(element_type);
      if (!dtype.ok()) return layer.Error(dtype.status().code(), dtype.status().message());
      if (*dtype != DataType::kUndefined && port_type.dtype != DataType::kUndefined &&
          *dtype != port_type.dtype) {
        return layer.Invalid(absl::StrCat("element_type ", element_type,
                                          " does not match the output port's precision ",
                                          DataTypeName(port_type.dtype)));
      }
      if (*dtype != DataType::kUndefined) type.dtype = *dtype;
    }
    if (layer.data.attribute("shape")) {
      absl::StatusOr<std::optional<std::vector<int64_t>>> shape =
          openvino::ParseShape(layer.data.attribute("shape").value());
      if (!shape.ok()) return layer.Invalid(shape.status().message());
      if (shape->has_value() && port_type.dims.has_value() &&
          (*shape)->size() != port_type.dims->size()) {
        return layer.Invalid(absl::StrCat("shape has rank ", (*shape)->size(),
                                          " but the output port has ", port_type.dims->size(),
                                          " dims"));
      }
      type.dims = *shape;
    }
    return type;
  }

  absl::StatusOr<std::shared_ptr<const Tensor>> ReadConst(const IrLayer& layer) const {
    LS_ASSIGN_OR_RETURN(std::string element_type, layer.StrAttr("element_type", std::nullopt));
    absl::StatusOr<DataType> dtype = openvino::ParseElementType(element_type);
    if (!dtype.ok()) return layer.Error(dtype.status().code(), dtype.status().message());
    if (*dtype == DataType::kUndefined) {
      return layer.Invalid(absl::StrCat("element_type '", element_type, "' is not concrete"));
    }
    const IrPort& port = layer.outputs[0];
    if (port.dtype != DataType::kUndefined && port.dtype != *dtype) {
      return layer.Invalid(absl::StrCat("element_type ", element_type,
                                        " does not match the output port's precision ",
                                        DataTypeName(port.dtype)));
    }
    LS_ASSIGN_OR_RETURN(std::string shape_text, layer.StrAttr("shape", std::nullopt));
    absl::StatusOr<std::optional<std::vector<int64_t>>> dims = openvino::ParseShape(shape_text);
    if (!dims.ok()) return layer.Invalid(dims.status().message());
    if (!dims->has_value()) return layer.Invalid("a constant needs a static shape");
    for (int64_t d : **dims) {
      if (d < 0) return layer.Invalid("a constant needs a static shape");
    }
    if (**dims != port.dims) {
      return layer.Invalid(
          absl::StrCat("shape '", shape_text, "' does not match the output port's dims"));
    }
    absl::StatusOr<Shape> shape = ValidateDims(**dims, "shape");
    if (!shape.ok()) return layer.Invalid(shape.status().message());
    LS_ASSIGN_OR_RETURN(int64_t offset, layer.IntAttr("offset", std::nullopt));
    LS_ASSIGN_OR_RETURN(int64_t size, layer.IntAttr("size", std::nullopt));
    if (offset < 0 || size < 0) return layer.Invalid("offset and size must not be negative");
    const uint64_t bytes = static_cast<uint64_t>(shape->NumElements()) * DataTypeSize(*dtype);
    if (static_cast<uint64_t>(size) != bytes) {
      return layer.Invalid(absl::StrCat("size is ", size, " bytes but ", DataTypeName(*dtype),
                                        shape->ToString(), " needs ", bytes));
    }
    if (static_cast<uint64_t>(offset) > weights_.size() ||
        static_cast<uint64_t>(size) > weights_.size() - static_cast<uint64_t>(offset)) {
      return layer.Invalid(absl::StrCat("bytes [", offset, ", ", offset, " + ", size,
                                        ") are outside the .bin file (", weights_.size(),
                                        " bytes)"));
    }
    auto tensor = std::make_shared<Tensor>(*dtype, *shape);
    if (bytes > 0) std::memcpy(tensor->mutable_raw_data(), weights_.data() + offset, bytes);
    if (*dtype == DataType::kBool) {
      bool* b = tensor->mutable_data<bool>();
      const uint8_t* raw = reinterpret_cast<const uint8_t*>(weights_.data() + offset);
      for (uint64_t k = 0; k < bytes; ++k) b[k] = raw[k] != 0;
    }
    return std::shared_ptr<const Tensor>(std::move(tensor));
  }

  // A sliced input's or concatenated output's start/end/part_size/stride (TensorIterator writes
  // them; Loop-5 uses the defaults), read as OpenVINO does: the inclusive index range
  // [start, end] (negative values count from the end; defaults 0 and -1, the whole axis) is cut
  // into parts of part_size, iterated forward for a positive stride and backward for a negative
  // one. The stride's magnitude is the step between parts, so it must be 1 or part_size (the two
  // spellings of contiguous parts that OpenVINO's reference and CPU plugin both read that way).
  struct SliceAttrs {
    int64_t stride = 1;
    int64_t part_size = 1;
    int64_t start = 0;
    int64_t end = -1;
  };
  static absl::StatusOr<SliceAttrs> ReadSliceAttrs(const IrLayer& layer,
                                                   const pugi::xml_node& entry) {
    const std::string what = absl::StrCat("port_map ", entry.name(), " (external_port_id ",
                                          entry.attribute("external_port_id").value(), ")");
    SliceAttrs attrs;
    absl::StatusOr<int64_t> stride = ParseIntAttr(entry, "stride", 1);
    absl::StatusOr<int64_t> part_size = ParseIntAttr(entry, "part_size", 1);
    absl::StatusOr<int64_t> start = ParseIntAttr(entry, "start", 0);
    absl::StatusOr<int64_t> end = ParseIntAttr(entry, "end", -1);
    for (const absl::Status& s :
         {stride.status(), part_size.status(), start.status(), end.status()}) {
      if (!s.ok()) return layer.Invalid(absl::StrCat(what, ": ", s.message()));
    }
    if (*part_size < 1) {
      return layer.Invalid(absl::StrCat(what, ": part_size ", *part_size, " must be positive"));
    }
    if (*stride == 0) return layer.Invalid(absl::StrCat(what, ": stride must not be 0"));
    const int64_t step = *stride < 0 ? -*stride : *stride;
    if (step != 1 && step != *part_size) {
      return layer.Error(absl::StatusCode::kUnimplemented,
                         absl::StrCat(what, ": stride ", *stride, " with part_size ", *part_size,
                                      " (parts must be contiguous: |stride| 1 or part_size)"));
    }
    attrs.stride = *stride < 0 ? -1 : 1;
    attrs.part_size = *part_size;
    attrs.start = *start;
    attrs.end = *end;
    return attrs;
  }

  // What the steps of LowerLoop share: the layer, its imported body, and the node and spec being
  // built.
  struct LoopLowering {
    explicit LoopLowering(const IrLayer& layer) : layer(layer), is_loop(layer.type == "Loop") {}

    const IrLayer& layer;
    bool is_loop;
    std::shared_ptr<Graph> body;
    NetworkIo bio;
    Node node;
    std::shared_ptr<LoopSpec> spec;
    absl::flat_hash_map<int64_t, int> input_of_port;  // layer input port id -> node input
    absl::flat_hash_map<int64_t, int64_t> back_edge;  // Parameter id -> Result id
  };

  // Loop-5 and TensorIterator-1 -> a "Loop" node with a LoopSpec.
  absl::Status LowerLoop(const IrLayer& layer, const LayerValues& values, int depth, Graph& graph) {
    if (depth >= kMaxBodyDepth) {
      return layer.Invalid(
          absl::StrCat("Loop bodies are nested more than ", kMaxBodyDepth, " deep"));
    }
    const pugi::xml_node body_xml = layer.node.child("body");
    if (!body_xml) return layer.Invalid("has no <body>");
    const pugi::xml_node port_map = layer.node.child("port_map");
    if (!port_map) return layer.Invalid("has no <port_map>");

    LoopLowering lowering(layer);
    lowering.body = std::make_shared<Graph>();
    lowering.body->name = absl::StrCat(layer.name, "/body");
    absl::Status status = ImportNetwork(body_xml, depth + 1, *lowering.body, lowering.bio);
    if (!status.ok()) return Annotate(status, absl::StrCat(layer.Label(), ": body: "));

    Node& node = lowering.node;
    node.name = layer.name.empty() ? absl::StrCat(layer.type, "_", layer.id) : layer.name;
    node.op_type = "Loop";
    node.opset = openvino::kOnnxOpset;
    node.outputs = values.outputs;
    lowering.spec = std::make_shared<LoopSpec>();
    lowering.spec->negative_trip_count = LoopSpec::NegativeTripCount::kInfinite;

    LS_RETURN_IF_ERROR(ConnectLoopInputs(lowering, values));
    LS_RETURN_IF_ERROR(ReadBackEdges(lowering));
    LS_RETURN_IF_ERROR(MapLoopInputs(lowering, port_map));
    LS_RETURN_IF_ERROR(MapLoopOutputs(lowering, port_map));
    LS_RETURN_IF_ERROR(CheckLoopPorts(lowering));

    Attribute attr;
    attr.type = Attribute::Type::kGraph;
    attr.graph = std::move(lowering.body);
    node.attributes["body"] = std::move(attr);
    node.loop = std::move(lowering.spec);
    graph.nodes.push_back(std::move(node));
    return absl::OkStatus();
  }

  // Node inputs: [0] trip count (input port 0 of a Loop), [1] execution condition (port 1),
  // then the other input ports in file order. An unconnected trip count is infinite; an
  // unconnected condition is true.
  static absl::Status ConnectLoopInputs(LoopLowering& l, const LayerValues& values) {
    const IrLayer& layer = l.layer;
    l.node.inputs = {kNoValue, kNoValue};
    for (size_t k = 0; k < layer.inputs.size(); ++k) {
      const int64_t id = layer.inputs[k].id;
      if (l.is_loop && (id == 0 || id == 1)) {
        l.node.inputs[id] = values.inputs[k];
        l.input_of_port[id] = static_cast<int>(id);
        const DataType t = layer.inputs[k].dtype;
        if (id == 0 && t != DataType::kUndefined && t != DataType::kInt32 &&
            t != DataType::kInt64) {
          return layer.Invalid(absl::StrCat("the trip count (input port 0) has precision ",
                                            DataTypeName(t), "; it must be int32 or int64"));
        }
        if (id == 1 && t != DataType::kUndefined && t != DataType::kBool) {
          return layer.Invalid(absl::StrCat("the execution condition (input port 1) has precision ",
                                            DataTypeName(t), "; it must be boolean"));
        }
        continue;
      }
      l.input_of_port[id] = static_cast<int>(l.node.inputs.size());
      l.node.inputs.push_back(values.inputs[k]);
    }
    return absl::OkStatus();
  }

  // Back edges: body Result -> body Parameter.
  static absl::Status ReadBackEdges(LoopLowering& l) {
    const IrLayer& layer = l.layer;
    for (pugi::xml_node e = layer.node.child("back_edges").child("edge"); e;
         e = e.next_sibling("edge")) {
      absl::StatusOr<int64_t> from = ParseIntAttr(e, "from-layer", std::nullopt);
      absl::StatusOr<int64_t> to = ParseIntAttr(e, "to-layer", std::nullopt);
      if (!from.ok() || !to.ok()) {
        return layer.Invalid(
            absl::StrCat("back edge: ", (from.ok() ? to.status() : from.status()).message()));
      }
      if (!l.bio.results.contains(*from)) {
        return layer.Invalid(absl::StrCat("back edge from layer ", *from, " to layer ", *to,
                                          ": layer ", *from, " is not a Result of the body"));
      }
      if (!l.bio.params.contains(*to)) {
        return layer.Invalid(absl::StrCat("back edge from layer ", *from, " to layer ", *to,
                                          ": layer ", *to, " is not a Parameter of the body"));
      }
      if (l.back_edge.contains(*to)) {
        return layer.Invalid(absl::StrCat("body Parameter ", *to, " has more than one back edge"));
      }
      const ValueType& rt = l.body->values[l.body->outputs[l.bio.results[*from]]].type;
      const ValueType& pt = l.body->values[l.body->inputs[l.bio.params[*to]]].type;
      if (rt.dtype != DataType::kUndefined && pt.dtype != DataType::kUndefined &&
          rt.dtype != pt.dtype) {
        return layer.Invalid(absl::StrCat("back edge from layer ", *from, " to layer ", *to,
                                          ": element types differ (", DataTypeName(rt.dtype),
                                          " vs ", DataTypeName(pt.dtype), ")"));
      }
      l.back_edge[*to] = *from;
    }
    return absl::OkStatus();
  }

  // Port map inputs: every body Parameter gets a value, from a node input (sliced, carried or
  // invariant) or as the current iteration.
  static absl::Status MapLoopInputs(LoopLowering& l, const pugi::xml_node& port_map) {
    std::vector<bool> param_mapped(l.body->inputs.size(), false);
    for (pugi::xml_node in = port_map.child("input"); in; in = in.next_sibling("input")) {
      LS_RETURN_IF_ERROR(MapLoopInput(l, in, param_mapped));
    }
    for (size_t p = 0; p < param_mapped.size(); ++p) {
      if (param_mapped[p]) continue;
      // The older Loop-5 spec leaves the current-iteration Parameter out of the port map.
      const ValueType& ptype = l.body->values[l.body->inputs[p]].type;
      if (l.is_loop && l.spec->current_iteration_param < 0 &&
          (ptype.dtype == DataType::kInt32 || ptype.dtype == DataType::kInt64) &&
          KnownRankAtMost1(ptype)) {
        bool has_edge = false;
        for (const auto& [param_id, result_id] : l.back_edge) {
          has_edge = has_edge || l.bio.params[param_id] == static_cast<int>(p);
        }
        if (!has_edge) {
          l.spec->current_iteration_param = static_cast<int>(p);
          continue;
        }
      }
      return l.layer.Invalid(absl::StrCat("body ", l.bio.param_labels[p],
                                          " gets no value: it is not in the port map"));
    }
    return absl::OkStatus();
  }

  // One <input> entry of the port map.
  static absl::Status MapLoopInput(LoopLowering& l, const pugi::xml_node& in,
                                   std::vector<bool>& param_mapped) {
    const IrLayer& layer = l.layer;
    absl::StatusOr<int64_t> ext = ParseIntAttr(in, "external_port_id", std::nullopt);
    absl::StatusOr<int64_t> internal = ParseIntAttr(in, "internal_layer_id", std::nullopt);
    if (!ext.ok() || !internal.ok()) {
      return layer.Invalid(
          absl::StrCat("port_map: ", (ext.ok() ? internal.status() : ext.status()).message()));
    }
    const std::string what = absl::StrCat("port_map input (external_port_id ", *ext,
                                          ", internal_layer_id ", *internal, ")");
    auto param = l.bio.params.find(*internal);
    if (param == l.bio.params.end()) {
      return layer.Invalid(
          absl::StrCat(what, ": layer ", *internal, " is not a Parameter of the body"));
    }
    const int p = param->second;
    if (param_mapped[p])
      return layer.Invalid(absl::StrCat(what, ": the Parameter is mapped twice"));
    param_mapped[p] = true;
    const ValueType& ptype = l.body->values[l.body->inputs[p]].type;
    const std::string purpose = in.attribute("purpose").value();
    if (purpose == "current_iteration" && l.is_loop) {
      if ((ptype.dtype != DataType::kUndefined && ptype.dtype != DataType::kInt32 &&
           ptype.dtype != DataType::kInt64) ||
          !KnownRankAtMost1(ptype)) {
        return layer.Invalid(absl::StrCat(what,
                                          ": the current iteration must be an int32 or "
                                          "int64 scalar or [1], the Parameter is ",
                                          ptype.ToString()));
      }
      l.spec->current_iteration_param = p;
      return absl::OkStatus();
    }
    if (!purpose.empty()) {
      return layer.Invalid(absl::StrCat(what, ": purpose '", purpose, "' is not valid here"));
    }
    if (*ext < 0) {
      return layer.Invalid(absl::StrCat(what, ": the Parameter is not connected to an input"));
    }
    auto port = l.input_of_port.find(*ext);
    if (port == l.input_of_port.end()) {
      return layer.Invalid(absl::StrCat(what, ": the layer has no input port ", *ext));
    }
    if (l.node.inputs[port->second] == kNoValue) {
      return layer.Invalid(absl::StrCat(what, ": input port ", *ext, " is not connected"));
    }
    LoopSpec::InputPort ip;
    ip.node_input = port->second;
    ip.body_param = p;
    if (in.attribute("axis")) {
      // OpenVINO's IR reader makes an entry with an axis a sliced input before it looks at
      // back edges, so a back edge onto it is ignored: the slice wins.
      l.back_edge.erase(*internal);
      absl::StatusOr<int64_t> axis = ParseIntAttr(in, "axis", std::nullopt);
      if (!axis.ok()) return layer.Invalid(absl::StrCat(what, ": ", axis.status().message()));
      LS_ASSIGN_OR_RETURN(SliceAttrs slice, ReadSliceAttrs(layer, in));
      ip.kind = LoopSpec::InputPort::Kind::kSliced;
      ip.axis = *axis;
      ip.stride = slice.stride;
      ip.part_size = slice.part_size;
      ip.start = slice.start;
      ip.end = slice.end;
    } else if (auto edge = l.back_edge.find(*internal); edge != l.back_edge.end()) {
      ip.kind = LoopSpec::InputPort::Kind::kCarried;
      ip.back_edge = l.bio.results[edge->second];
    } else {
      ip.kind = LoopSpec::InputPort::Kind::kInvariant;
    }
    l.spec->inputs.push_back(ip);
    return absl::OkStatus();
  }

  // Port map outputs: every output port of the layer comes from one body Result.
  static absl::Status MapLoopOutputs(LoopLowering& l, const pugi::xml_node& port_map) {
    std::vector<bool> output_mapped(l.node.outputs.size(), false);
    for (pugi::xml_node out = port_map.child("output"); out; out = out.next_sibling("output")) {
      LS_RETURN_IF_ERROR(MapLoopOutput(l, out, output_mapped));
    }
    for (size_t k = 0; k < output_mapped.size(); ++k) {
      if (!output_mapped[k]) {
        return l.layer.Invalid(
            absl::StrCat("output port ", l.layer.outputs[k].id, " is not in the port map"));
      }
    }
    return absl::OkStatus();
  }

  // One <output> entry of the port map.
  static absl::Status MapLoopOutput(LoopLowering& l, const pugi::xml_node& out,
                                    std::vector<bool>& output_mapped) {
    const IrLayer& layer = l.layer;
    absl::StatusOr<int64_t> ext = ParseIntAttr(out, "external_port_id", std::nullopt);
    absl::StatusOr<int64_t> internal = ParseIntAttr(out, "internal_layer_id", std::nullopt);
    if (!ext.ok() || !internal.ok()) {
      return layer.Invalid(
          absl::StrCat("port_map: ", (ext.ok() ? internal.status() : ext.status()).message()));
    }
    const std::string what = absl::StrCat("port_map output (external_port_id ", *ext,
                                          ", internal_layer_id ", *internal, ")");
    auto result = l.bio.results.find(*internal);
    if (result == l.bio.results.end()) {
      return layer.Invalid(
          absl::StrCat(what, ": layer ", *internal, " is not a Result of the body"));
    }
    const int r = result->second;
    const std::string purpose = out.attribute("purpose").value();
    if (purpose == "execution_condition" && l.is_loop) {
      const ValueType& rtype = l.body->values[l.body->outputs[r]].type;
      if ((rtype.dtype != DataType::kUndefined && rtype.dtype != DataType::kBool) ||
          !KnownRankAtMost1(rtype)) {
        return layer.Invalid(absl::StrCat(what,
                                          ": the execution condition must be a boolean "
                                          "scalar or [1], the Result's input is ",
                                          rtype.ToString()));
      }
      l.spec->condition_result = r;
    } else if (!purpose.empty()) {
      return layer.Invalid(absl::StrCat(what, ": purpose '", purpose, "' is not valid here"));
    }
    if (*ext < 0) return absl::OkStatus();  // not connected to an output of the layer
    const int k = layer.OutputIndex(*ext);
    if (k < 0) return layer.Invalid(absl::StrCat(what, ": the layer has no output port ", *ext));
    if (output_mapped[k]) {
      return layer.Invalid(absl::StrCat(what, ": output port ", *ext, " is mapped twice"));
    }
    output_mapped[k] = true;
    LoopSpec::OutputPort op;
    op.node_output = k;
    op.body_result = r;
    if (out.attribute("axis")) {
      absl::StatusOr<int64_t> axis = ParseIntAttr(out, "axis", std::nullopt);
      if (!axis.ok()) return layer.Invalid(absl::StrCat(what, ": ", axis.status().message()));
      // Each iteration's result is one part; the range only fixes the order of the parts.
      LS_ASSIGN_OR_RETURN(SliceAttrs slice, ReadSliceAttrs(layer, out));
      op.stride = slice.stride;
      op.kind = LoopSpec::OutputPort::Kind::kConcat;
      op.axis = *axis;
    } else {
      op.kind = LoopSpec::OutputPort::Kind::kLastValue;
    }
    l.spec->outputs.push_back(op);
    return absl::OkStatus();
  }

  // Final checks: every carried Parameter has an initial value, and a TensorIterator has a
  // sliced input to count its iterations.
  static absl::Status CheckLoopPorts(LoopLowering& l) {
    for (const auto& [param_id, result_id] : l.back_edge) {
      bool initialised = false;
      for (const LoopSpec::InputPort& ip : l.spec->inputs) {
        initialised = initialised || ip.body_param == l.bio.params[param_id];
      }
      if (!initialised) {
        return l.layer.Invalid(absl::StrCat(
            "body Parameter ", param_id, " has a back edge but no initial value in the port map"));
      }
    }
    if (!l.is_loop) {
      bool sliced = false;
      for (const LoopSpec::InputPort& ip : l.spec->inputs) {
        sliced = sliced || ip.kind == LoopSpec::InputPort::Kind::kSliced;
      }
      if (!sliced) {
        return l.layer.Error(absl::StatusCode::kUnimplemented,
                             "a TensorIterator without sliced inputs has no iteration count");
      }
    }
    return absl::OkStatus();
  }

  absl::string_view weights_;
};

// Clients address tensors by name: two inputs (or two outputs) may not share one.
absl::Status CheckUniqueNames(const Graph& graph, const std::vector<ValueId>& ids,
                              const std::vector<std::string>& labels, absl::string_view what) {
  absl::flat_hash_map<std::string, size_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string& name = graph.values[ids[i]].name;
    auto [it, inserted] = seen.emplace(name, i);
    if (!inserted && ids[it->second] != ids[i]) {
      return absl::InvalidArgumentError(absl::StrCat(labels[i], ": ", what, " name '", name,
                                                     "' is also used by ", labels[it->second]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Graph>> ImportOpenVinoModel(absl::string_view xml,
                                                           absl::string_view weights) {
  pugi::xml_document doc;
  const pugi::xml_parse_result parsed = doc.load_buffer(xml.data(), xml.size());
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the .xml is not valid XML: ", parsed.description(), " at byte ", parsed.offset));
  }
  const pugi::xml_node net = doc.child("net");
  if (!net) return absl::InvalidArgumentError("the .xml has no <net> root element");
  int64_t version = 0;
  if (!absl::SimpleAtoi(net.attribute("version").value(), &version)) {
    return absl::InvalidArgumentError("<net> has no valid 'version' attribute");
  }
  if (version != 10 && version != 11) {
    return absl::UnimplementedError(
        absl::StrCat("OpenVINO IR version ", version, " is not supported (10 and 11 are)"));
  }
  auto graph = std::make_shared<Graph>();
  graph->name = net.attribute("name").value();
  OpenVinoImporter importer(weights);
  NetworkIo io;
  LS_RETURN_IF_ERROR(importer.ImportNetwork(net, 0, *graph, io));
  LS_RETURN_IF_ERROR(CheckUniqueNames(*graph, graph->inputs, io.param_labels, "input"));
  LS_RETURN_IF_ERROR(CheckUniqueNames(*graph, graph->outputs, io.result_labels, "output"));
  return graph;
}

}  // namespace loopserve::engine
