#include "engine/import/onnx_importer.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/engine.h"
#include "engine/import/onnx_scan.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "onnx/onnx_pb.h"

namespace loopserve::engine {
namespace {

// Names visible in one graph, chained to the enclosing graph's scope. Looking up a name the graph
// does not define captures it from the enclosing scope (recursively), which is how subgraphs read
// outer values without the IR having pointers between graphs.
class Scope {
 public:
  Scope(Graph& graph, Scope* parent) : graph_(graph), parent_(parent) {}

  Graph& graph() { return graph_; }

  // Defines `name` in this graph; InvalidArgument when it is already defined here.
  absl::StatusOr<ValueId> Define(const std::string& name, ValueType type) {
    if (names_.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph '", graph_.name, "': value '", name, "' is defined more than once"));
    }
    const ValueId id = graph_.AddValue(name, std::move(type));
    names_[name] = id;
    return id;
  }

  // Finds `name` here or in an enclosing scope (capturing it); kNoValue when nowhere.
  ValueId Lookup(const std::string& name) {
    auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    if (parent_ == nullptr) return kNoValue;
    const ValueId outer = parent_->Lookup(name);
    if (outer == kNoValue) return kNoValue;
    const ValueId inner = graph_.AddValue(name, parent_->graph().values[outer].type);
    graph_.captures.push_back(Capture{inner, outer});
    names_[name] = inner;
    return inner;
  }

  // Sets the declared type of an already defined local value (from value_info / outputs).
  void RefineType(const std::string& name, const ValueType& type) {
    auto it = names_.find(name);
    if (it == names_.end()) return;
    ValueType& current = graph_.values[it->second].type;
    if (current.kind == ValueKind::kUnknown) current = type;
  }

 private:
  Graph& graph_;
  Scope* parent_;
  absl::flat_hash_map<std::string, ValueId> names_;
};

class OnnxImporter {
 public:
  absl::StatusOr<std::shared_ptr<Graph>> Import(const onnx::ModelProto& model) {
    for (const onnx::OperatorSetIdProto& opset : model.opset_import()) {
      const std::string domain = opset.domain() == "ai.onnx" ? "" : opset.domain();
      opsets_[domain] = static_cast<int>(opset.version());
    }
    // IR version 3 and earlier may omit opset_import: the default domain is then opset 1.
    if (!opsets_.contains("")) opsets_[""] = 1;
    auto graph = std::make_shared<Graph>();
    LS_RETURN_IF_ERROR(ImportGraph(model.graph(), nullptr, /*is_main=*/true, *graph));
    return graph;
  }

 private:
  absl::StatusOr<ValueType> ConvertType(const onnx::TypeProto& type, absl::string_view what) {
    ValueType out;
    switch (type.value_case()) {
      case onnx::TypeProto::kTensorType: {
        out.kind = ValueKind::kTensor;
        const auto& t = type.tensor_type();
        if (t.elem_type() != 0) {
          absl::StatusOr<DataType> dtype = DataTypeFromOnnx(t.elem_type());
          if (!dtype.ok()) return Annotate(dtype.status(), absl::StrCat(what, ": "));
          out.dtype = *dtype;
        }
        if (t.has_shape()) {
          std::vector<int64_t> dims;
          for (const auto& d : t.shape().dim()) {
            dims.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
          }
          out.dims = std::move(dims);
        }
        return out;
      }
      case onnx::TypeProto::kSequenceType: {
        LS_ASSIGN_OR_RETURN(ValueType elem, ConvertType(type.sequence_type().elem_type(), what));
        out.kind = ValueKind::kSequence;
        out.dtype = elem.dtype;
        return out;
      }
      case onnx::TypeProto::kOptionalType: {
        LS_ASSIGN_OR_RETURN(ValueType elem, ConvertType(type.optional_type().elem_type(), what));
        out.kind = ValueKind::kOptional;
        out.dtype = elem.dtype;
        out.dims = elem.dims;
        out.optional_of = elem.kind;
        return out;
      }
      case onnx::TypeProto::VALUE_NOT_SET:
        out.kind = ValueKind::kUnknown;
        return out;
      default:
        return absl::UnimplementedError(
            absl::StrCat(what, ": map and sparse types are not supported"));
    }
  }

  // Types of value_info entries are hints; an unsupported one is ignored rather than fatal.
  ValueType TypeHint(const onnx::ValueInfoProto& info) {
    if (!info.has_type()) return ValueType::Unknown();
    absl::StatusOr<ValueType> type = ConvertType(info.type(), info.name());
    return type.ok() ? *type : ValueType::Unknown();
  }

  absl::Status AddConstant(Scope& scope, const std::string& name, Tensor tensor) {
    ValueType type;
    type.dtype = tensor.dtype();
    type.dims = std::vector<int64_t>(tensor.shape().dims().begin(), tensor.shape().dims().end());
    LS_ASSIGN_OR_RETURN(ValueId id, scope.Define(name, type));
    scope.graph().constants.emplace_back(id, std::make_shared<const Tensor>(std::move(tensor)));
    return absl::OkStatus();
  }

  // The value of a Constant node (one of value, value_float(s), value_int(s)).
  absl::StatusOr<Tensor> ConstantValue(const onnx::NodeProto& node, const std::string& label) {
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.name() == "value") return TensorFromOnnx(a.t(), label);
      if (a.name() == "value_float") {
        Tensor t(DataType::kFloat32, Shape{});
        t.mutable_data<float>()[0] = a.f();
        return t;
      }
      if (a.name() == "value_int") {
        Tensor t(DataType::kInt64, Shape{});
        t.mutable_data<int64_t>()[0] = a.i();
        return t;
      }
      if (a.name() == "value_floats") {
        Tensor t(DataType::kFloat32, Shape{static_cast<int64_t>(a.floats_size())});
        for (int i = 0; i < a.floats_size(); ++i) t.mutable_data<float>()[i] = a.floats(i);
        return t;
      }
      if (a.name() == "value_ints") {
        Tensor t(DataType::kInt64, Shape{static_cast<int64_t>(a.ints_size())});
        for (int i = 0; i < a.ints_size(); ++i) t.mutable_data<int64_t>()[i] = a.ints(i);
        return t;
      }
      return absl::UnimplementedError(
          absl::StrCat(label, ": Constant attribute '", a.name(), "' is not supported"));
    }
    return absl::InvalidArgumentError(absl::StrCat(label, ": Constant has no value attribute"));
  }

  absl::StatusOr<Attribute> ConvertAttribute(const onnx::AttributeProto& a, Scope& scope,
                                             const std::string& label) {
    Attribute out;
    int type = a.type();
    if (type == onnx::AttributeProto::UNDEFINED) {
      // Old models leave `type` unset: infer it from the populated field.
      if (a.has_f())
        type = onnx::AttributeProto::FLOAT;
      else if (a.has_i())
        type = onnx::AttributeProto::INT;
      else if (a.has_s())
        type = onnx::AttributeProto::STRING;
      else if (a.has_t())
        type = onnx::AttributeProto::TENSOR;
      else if (a.has_g())
        type = onnx::AttributeProto::GRAPH;
      else if (a.floats_size() > 0)
        type = onnx::AttributeProto::FLOATS;
      else if (a.ints_size() > 0)
        type = onnx::AttributeProto::INTS;
      else if (a.strings_size() > 0)
        type = onnx::AttributeProto::STRINGS;
      else if (a.graphs_size() > 0)
        type = onnx::AttributeProto::GRAPHS;
    }
    switch (type) {
      case onnx::AttributeProto::FLOAT:
        out.type = Attribute::Type::kFloat;
        out.f = a.f();
        return out;
      case onnx::AttributeProto::INT:
        out.type = Attribute::Type::kInt;
        out.i = a.i();
        return out;
      case onnx::AttributeProto::STRING:
        out.type = Attribute::Type::kString;
        out.s = a.s();
        return out;
      case onnx::AttributeProto::FLOATS:
        out.type = Attribute::Type::kFloats;
        out.floats.assign(a.floats().begin(), a.floats().end());
        return out;
      case onnx::AttributeProto::INTS:
        out.type = Attribute::Type::kInts;
        out.ints.assign(a.ints().begin(), a.ints().end());
        return out;
      case onnx::AttributeProto::STRINGS:
        out.type = Attribute::Type::kStrings;
        out.strings.assign(a.strings().begin(), a.strings().end());
        return out;
      case onnx::AttributeProto::TENSOR: {
        out.type = Attribute::Type::kTensor;
        LS_ASSIGN_OR_RETURN(
            Tensor t, TensorFromOnnx(a.t(), absl::StrCat(label, ": attribute '", a.name(), "'")));
        out.tensor = std::make_shared<const Tensor>(std::move(t));
        return out;
      }
      case onnx::AttributeProto::GRAPH: {
        out.type = Attribute::Type::kGraph;
        auto sub = std::make_shared<Graph>();
        LS_RETURN_IF_ERROR(ImportGraph(a.g(), &scope, /*is_main=*/false, *sub));
        out.graph = std::move(sub);
        return out;
      }
      case onnx::AttributeProto::GRAPHS: {
        out.type = Attribute::Type::kGraphs;
        for (const onnx::GraphProto& g : a.graphs()) {
          auto sub = std::make_shared<Graph>();
          LS_RETURN_IF_ERROR(ImportGraph(g, &scope, /*is_main=*/false, *sub));
          out.graphs.push_back(std::move(sub));
        }
        return out;
      }
      default:
        return absl::UnimplementedError(absl::StrCat(label, ": attribute '", a.name(),
                                                     "' has an unsupported type (", type, ")"));
    }
  }

  absl::Status ImportGraph(const onnx::GraphProto& proto, Scope* parent, bool is_main,
                           Graph& graph) {
    graph.name = proto.name();
    Scope scope(graph, parent);
    if (proto.sparse_initializer_size() > 0) {
      return absl::UnimplementedError(
          absl::StrCat("graph '", proto.name(), "': sparse initializers are not supported"));
    }
    LS_ASSIGN_OR_RETURN(absl::flat_hash_set<std::string> initializer_names,
                        ImportInitializers(proto, scope));
    LS_RETURN_IF_ERROR(ImportInputs(proto, initializer_names, is_main, scope, graph));
    LS_ASSIGN_OR_RETURN(std::vector<int> node_indices, DefineNodeOutputs(proto, scope));
    for (int n : node_indices) {
      LS_ASSIGN_OR_RETURN(Node node, ImportNode(proto.node(n), n, scope));
      graph.nodes.push_back(std::move(node));
    }
    LS_RETURN_IF_ERROR(ImportOutputs(proto, scope, graph));
    return SortTopologically(graph);
  }

  // 1. Initializers are constants. A graph input of the same name (IR < 4) is the same constant:
  //    it is not an input the caller must feed. Returns the initializers' names.
  absl::StatusOr<absl::flat_hash_set<std::string>> ImportInitializers(const onnx::GraphProto& proto,
                                                                      Scope& scope) {
    absl::flat_hash_set<std::string> initializer_names;
    for (const onnx::TensorProto& init : proto.initializer()) {
      LS_ASSIGN_OR_RETURN(Tensor t,
                          TensorFromOnnx(init, absl::StrCat("initializer '", init.name(), "'")));
      LS_RETURN_IF_ERROR(AddConstant(scope, init.name(), std::move(t)));
      initializer_names.insert(init.name());
    }
    return initializer_names;
  }

  // 2. Inputs.
  absl::Status ImportInputs(const onnx::GraphProto& proto,
                            const absl::flat_hash_set<std::string>& initializer_names, bool is_main,
                            Scope& scope, Graph& graph) {
    for (const onnx::ValueInfoProto& input : proto.input()) {
      if (is_main && initializer_names.contains(input.name())) continue;
      if (!is_main && initializer_names.contains(input.name())) {
        return absl::InvalidArgumentError(absl::StrCat("graph '", proto.name(), "': input '",
                                                       input.name(),
                                                       "' is also an initializer of the body"));
      }
      ValueType type = ValueType::Unknown();
      if (input.has_type()) {
        // The main graph's input types are a contract with the caller: unsupported ones fail.
        LS_ASSIGN_OR_RETURN(type,
                            ConvertType(input.type(), absl::StrCat("input '", input.name(), "'")));
      }
      LS_ASSIGN_OR_RETURN(ValueId id, scope.Define(input.name(), type));
      graph.inputs.push_back(id);
    }
    return absl::OkStatus();
  }

  // 3. Every node output is defined up front, so nodes may come in any order (the graph is
  //    sorted later) and body names shadow enclosing ones. Constant nodes become constants.
  //    Returns the indices of the other nodes, in file order.
  absl::StatusOr<std::vector<int>> DefineNodeOutputs(const onnx::GraphProto& proto, Scope& scope) {
    std::vector<int> node_indices;
    for (int n = 0; n < proto.node_size(); ++n) {
      const onnx::NodeProto& node = proto.node(n);
      const std::string label = NodeLabel(node, n);
      const std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
      if (node.op_type() == "Constant" && domain.empty()) {
        if (node.output_size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(label, ": Constant must have 1 output"));
        }
        LS_ASSIGN_OR_RETURN(Tensor t, ConstantValue(node, label));
        LS_RETURN_IF_ERROR(AddConstant(scope, node.output(0), std::move(t)));
        continue;
      }
      for (const std::string& out : node.output()) {
        if (out.empty()) continue;
        absl::StatusOr<ValueId> id = scope.Define(out, ValueType::Unknown());
        if (!id.ok()) return Annotate(id.status(), absl::StrCat(label, ": "));
      }
      node_indices.push_back(n);
    }
    for (const onnx::ValueInfoProto& info : proto.value_info()) {
      scope.RefineType(info.name(), TypeHint(info));
    }
    for (const onnx::ValueInfoProto& info : proto.output()) {
      scope.RefineType(info.name(), TypeHint(info));
    }
    return node_indices;
  }

  // 4. One node: resolve inputs (locally, else from enclosing scopes), convert attributes.
  absl::StatusOr<Node> ImportNode(const onnx::NodeProto& proto_node, int n, Scope& scope) {
    Node node;
    node.name =
        proto_node.name().empty() ? absl::StrCat(proto_node.op_type(), "_", n) : proto_node.name();
    node.op_type = proto_node.op_type();
    node.domain = proto_node.domain() == "ai.onnx" ? "" : proto_node.domain();
    auto opset = opsets_.find(node.domain);
    if (opset == opsets_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Label(), ": domain '", node.domain, "' has no opset_import entry"));
    }
    node.opset = opset->second;
    for (const std::string& in : proto_node.input()) {
      if (in.empty()) {
        node.inputs.push_back(kNoValue);
        continue;
      }
      const ValueId id = scope.Lookup(in);
      if (id == kNoValue) {
        return absl::InvalidArgumentError(absl::StrCat(
            node.Label(), ": input '", in, "' is not defined in this or any enclosing graph"));
      }
      node.inputs.push_back(id);
    }
    for (const std::string& out : proto_node.output()) {
      node.outputs.push_back(out.empty() ? kNoValue : scope.Lookup(out));
    }
    for (const onnx::AttributeProto& a : proto_node.attribute()) {
      // A TypeProto attribute (Optional's `type`) only declares a static type; nothing at run
      // time depends on it, so it is dropped.
      if (a.type() == onnx::AttributeProto::TYPE_PROTO) continue;
      LS_ASSIGN_OR_RETURN(Attribute attr, ConvertAttribute(a, scope, node.Label()));
      if (attr.graph != nullptr) AddImplicitInputs(*attr.graph, node);
      for (const auto& g : attr.graphs) AddImplicitInputs(*g, node);
      node.attributes[a.name()] = std::move(attr);
    }
    if (node.op_type == "Loop" && node.domain.empty()) {
      LS_RETURN_IF_ERROR(LowerOnnxLoop(node));
    } else if (node.op_type == "Scan" && node.domain.empty()) {
      LS_RETURN_IF_ERROR(LowerOnnxScan(node));
    }
    return node;
  }

  // 5. Outputs.
  static absl::Status ImportOutputs(const onnx::GraphProto& proto, Scope& scope, Graph& graph) {
    for (const onnx::ValueInfoProto& output : proto.output()) {
      const ValueId id = scope.Lookup(output.name());
      if (id == kNoValue) {
        return absl::InvalidArgumentError(absl::StrCat("graph '", proto.name(), "': output '",
                                                       output.name(), "' is never produced"));
      }
      graph.outputs.push_back(id);
    }
    return absl::OkStatus();
  }

  static void AddImplicitInputs(const Graph& subgraph, Node& node) {
    for (const Capture& c : subgraph.captures) {
      if (std::find(node.implicit_inputs.begin(), node.implicit_inputs.end(), c.outer) ==
          node.implicit_inputs.end()) {
        node.implicit_inputs.push_back(c.outer);
      }
    }
  }

  static std::string NodeLabel(const onnx::NodeProto& node, int index) {
    const std::string name =
        node.name().empty() ? absl::StrCat(node.op_type(), "_", index) : node.name();
    return absl::StrCat("node '", name, "' (", node.op_type(), ")");
  }

  // ONNX Loop: inputs (M, cond, v_initial...), body (iter_num, cond_in, v...) ->
  // (cond_out, v..., scan...), outputs (v_final..., scan...). See LoopSpec.
  static absl::Status LowerOnnxLoop(Node& node) {
    std::shared_ptr<const Graph> body = node.GetGraph("body");
    if (body == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Label(), ": attribute 'body' is missing"));
    }
    if (node.inputs.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          node.Label(), ": Loop needs at least 2 inputs (M, cond), got ", node.inputs.size()));
    }
    const int carried = static_cast<int>(node.inputs.size()) - 2;
    const int body_inputs = static_cast<int>(body->inputs.size());
    const int body_outputs = static_cast<int>(body->outputs.size());
    if (body_inputs != carried + 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Label(), ": body has ", body_inputs, " inputs, expected ", carried + 2,
                       " (iteration number, condition and ", carried, " loop-carried values)"));
    }
    if (body_outputs < carried + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Label(), ": body has ", body_outputs, " outputs, expected at least ",
                       carried + 1, " (condition and ", carried, " loop-carried values)"));
    }
    const int scans = body_outputs - 1 - carried;
    const int node_outputs = static_cast<int>(node.outputs.size());
    if (node_outputs > carried + scans) {
      return absl::InvalidArgumentError(absl::StrCat(
          node.Label(), ": Loop has ", node_outputs, " outputs, but the body gives only ", carried,
          " loop-carried values and ", scans, " scan outputs"));
    }
    auto spec = std::make_shared<LoopSpec>();
    spec->negative_trip_count = LoopSpec::NegativeTripCount::kZeroIterations;
    spec->current_iteration_param = 0;
    spec->condition_result = 0;
    // The condition is carried like any value: cond_in <- cond (or true), cond_out -> cond_in.
    for (int j = -1; j < carried; ++j) {
      LoopSpec::InputPort port;
      port.kind = LoopSpec::InputPort::Kind::kCarried;
      port.node_input = 2 + j;
      port.body_param = 2 + j;
      port.back_edge = 1 + j;
      spec->inputs.push_back(port);
    }
    for (int j = 0; j < node_outputs; ++j) {
      LoopSpec::OutputPort port;
      port.node_output = j;
      port.body_result = 1 + j;
      port.kind =
          j < carried ? LoopSpec::OutputPort::Kind::kLastValue : LoopSpec::OutputPort::Kind::kStack;
      spec->outputs.push_back(port);
    }
    node.loop = std::move(spec);
    return absl::OkStatus();
  }

  absl::flat_hash_map<std::string, int> opsets_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Graph>> ImportOnnxModel(
    google::protobuf::io::ZeroCopyInputStream& input) {
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream coded(&input);
  coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
  if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError("the file is not a valid ONNX ModelProto");
  }
  if (!model.has_graph()) return absl::InvalidArgumentError("the ONNX model has no graph");
  OnnxImporter importer;
  return importer.Import(model);
}

absl::StatusOr<std::shared_ptr<Graph>> ImportOnnxModel(absl::string_view serialized) {
  if (serialized.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError("the file is not a valid ONNX ModelProto (over 2 GiB)");
  }
  google::protobuf::io::ArrayInputStream raw(serialized.data(),
                                             static_cast<int>(serialized.size()));
  return ImportOnnxModel(raw);
}

}  // namespace loopserve::engine
