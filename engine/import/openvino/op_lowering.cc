#include "engine/import/openvino/op_lowering.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "engine/base/status_macros.h"
#include "engine/engine.h"

namespace loopserve::engine::openvino {
namespace {

// The kernel's _layout values for OpenVINO's recurrent layouts (native::RecurrentLayout: the IR
// does not depend on the kernels, so the two numbers are restated here).
constexpr int64_t kRecurrentLayoutSequence = 2;
constexpr int64_t kRecurrentLayoutCell = 3;

Attribute IntAttribute(int64_t v) {
  Attribute a;
  a.type = Attribute::Type::kInt;
  a.i = v;
  return a;
}

Attribute IntsAttribute(std::vector<int64_t> v) {
  Attribute a;
  a.type = Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}

// Lowers one layer; see LowerLayer.
class Lowerer {
 public:
  Lowerer(const IrLayer& layer, const LayerValues& values, const ConstantMap& constants,
          Graph& graph)
      : layer_(layer), values_(values), constants_(constants), graph_(graph) {}

  absl::Status Lower() {
    const std::string& t = layer_.type;
    if (const char* onnx = BinaryOp(t)) return Binary(onnx);
    if (const char* onnx = UnaryOp(t)) return Unary(onnx);
    if (t == "NotEqual") return NotEqual();
    if (t == "MatMul") return MatMul();
    if (t == "Convert") return Convert();
    if (t == "ConvertLike") return ConvertLike();
    if (t == "Reshape") return Reshape();
    if (t == "Unsqueeze") return SqueezeOrUnsqueeze("Unsqueeze", 2);
    if (t == "Squeeze") return SqueezeOrUnsqueeze("Squeeze", 1);
    if (t == "Concat") return Concat();
    if (t == "Split") return Split(/*variadic=*/false);
    if (t == "VariadicSplit") return Split(/*variadic=*/true);
    if (t == "StridedSlice") return StridedSlice();
    if (t == "Slice") return Slice();
    if (t == "Gather") return Gather();
    if (t == "ShapeOf") return ShapeOf();
    if (t == "Broadcast") return Broadcast();
    if (t == "Softmax") return Softmax();
    if (t == "ReduceSum" || t == "ReduceMean" || t == "ReduceMax" || t == "ReduceMin" ||
        t == "ReduceProd") {
      return Reduce();
    }
    if (t == "Select") return Select();
    if (t == "FakeQuantize") return FakeQuantize();
    if (t == "Range") return Range();
    if (t == "Transpose") return Transpose();
    if (t == "LSTMCell" || t == "GRUCell" || t == "RNNCell" || t == "LSTMSequence" ||
        t == "GRUSequence" || t == "RNNSequence") {
      return Recurrent();
    }
    return layer_.Error(
        absl::StatusCode::kUnimplemented,
        absl::StrCat("layer type '", t, "' (",
                     layer_.version.empty() ? "no version" : layer_.version, ") is not supported"));
  }

 private:
  static const char* BinaryOp(const std::string& t) {
    static const std::pair<const char*, const char*> kOps[] = {{"Add", "Add"},
                                                               {"Subtract", "Sub"},
                                                               {"Multiply", "Mul"},
                                                               {"Divide", "Div"},
                                                               {"Power", "Pow"},
                                                               {"Maximum", "Max"},
                                                               {"Minimum", "Min"},
                                                               {"Less", "Less"},
                                                               {"Greater", "Greater"},
                                                               {"Equal", "Equal"},
                                                               {"LessEqual", "LessOrEqual"},
                                                               {"GreaterEqual", "GreaterOrEqual"},
                                                               {"LogicalAnd", "And"},
                                                               {"LogicalOr", "Or"},
                                                               {"LogicalXor", "Xor"}};
    for (const auto& [ov, onnx] : kOps) {
      if (t == ov) return onnx;
    }
    return nullptr;
  }

  static const char* UnaryOp(const std::string& t) {
    static const std::pair<const char*, const char*> kOps[] = {
        {"Negative", "Neg"}, {"Tanh", "Tanh"},    {"Sigmoid", "Sigmoid"}, {"Relu", "Relu"},
        {"Exp", "Exp"},      {"Sqrt", "Sqrt"},    {"Log", "Log"},         {"Abs", "Abs"},
        {"Floor", "Floor"},  {"Ceiling", "Ceil"}, {"Sign", "Sign"},       {"LogicalNot", "Not"}};
    for (const auto& [ov, onnx] : kOps) {
      if (t == ov) return onnx;
    }
    return nullptr;
  }

  // Checks the port counts and that the first `min_inputs` inputs are connected.
  absl::Status Ports(int min_inputs, int max_inputs, int outputs) {
    const int n = static_cast<int>(layer_.inputs.size());
    if (n < min_inputs || n > max_inputs) {
      return layer_.Invalid(absl::StrCat("has ", n, " input ports, expected ",
                                         min_inputs == max_inputs
                                             ? absl::StrCat(min_inputs)
                                             : absl::StrCat(min_inputs, " to ", max_inputs)));
    }
    for (int i = 0; i < n; ++i) {
      if (values_.inputs[i] == kNoValue && i < min_inputs) {
        return layer_.Invalid(
            absl::StrCat("input port ", layer_.inputs[i].id, " is not connected"));
      }
    }
    const int m = static_cast<int>(layer_.outputs.size());
    if (outputs >= 0 ? m != outputs : m < 1) {
      return layer_.Invalid(absl::StrCat("has ", m, " output ports, expected ",
                                         outputs >= 0 ? absl::StrCat(outputs) : "at least 1"));
    }
    return absl::OkStatus();
  }

  ValueId In(int i) const {
    return i < static_cast<int>(values_.inputs.size()) ? values_.inputs[i] : kNoValue;
  }
  ValueId Out(int i) const { return values_.outputs[i]; }

  DataType InType(int i) const {
    if (layer_.inputs[i].dtype != DataType::kUndefined) return layer_.inputs[i].dtype;
    return In(i) == kNoValue ? DataType::kUndefined : graph_.values[In(i)].type.dtype;
  }
  int InRank(int i) const { return static_cast<int>(layer_.inputs[i].dims.size()); }

  Node& Emit(const std::string& op, std::vector<ValueId> inputs, std::vector<ValueId> outputs) {
    Node node;
    node.name = emitted_ == 0 ? layer_.name : absl::StrCat(layer_.name, "/", op, "_", emitted_);
    if (node.name.empty()) node.name = absl::StrCat(layer_.type, "_", layer_.id);
    ++emitted_;
    node.op_type = op;
    node.opset = kOnnxOpset;
    node.inputs = std::move(inputs);
    node.outputs = std::move(outputs);
    graph_.nodes.push_back(std::move(node));
    return graph_.nodes.back();
  }

  ValueId Temp(DataType dtype, std::optional<std::vector<int64_t>> dims) {
    ValueType type;
    type.dtype = dtype;
    type.dims = std::move(dims);
    return graph_.AddValue(absl::StrCat(layer_.name, "/tmp_", temps_++), std::move(type));
  }

  ValueId CastTo(ValueId v, DataType to, std::optional<std::vector<int64_t>> dims) {
    const ValueId out = Temp(to, std::move(dims));
    Emit("Cast", {v}, {out}).attributes["to"] = IntAttribute(DataTypeToOnnx(to));
    return out;
  }

  // Input i as int64 (index lists are int64 in the ONNX ops); absent stays absent.
  ValueId AsInt64(int i) {
    if (In(i) == kNoValue || InType(i) == DataType::kInt64) return In(i);
    return CastTo(In(i), DataType::kInt64, layer_.inputs[i].dims);
  }

  absl::StatusOr<std::vector<int64_t>> ConstInts(int i, const char* what) {
    auto it = constants_.find(In(i));
    if (In(i) == kNoValue || it == constants_.end()) {
      return layer_.Error(absl::StatusCode::kUnimplemented,
                          absl::StrCat("input '", what, "' must be a constant"));
    }
    const Tensor& t = *it->second;
    std::vector<int64_t> v;
    if (t.rank() > 1 || !(t.dtype() == DataType::kInt32 || t.dtype() == DataType::kInt64)) {
      return layer_.Invalid(
          absl::StrCat("input '", what, "' must be an int32/int64 scalar or 1-D"));
    }
    for (int64_t k = 0; k < t.NumElements(); ++k) {
      v.push_back(t.dtype() == DataType::kInt64 ? t.data<int64_t>()[k] : t.data<int32_t>()[k]);
    }
    return v;
  }

  // auto_broadcast: "numpy" (the ONNX rule) or "none" (shapes must match: checked here when
  // both port shapes are static).
  absl::Status CheckAutoBroadcast(int a, int b) {
    LS_ASSIGN_OR_RETURN(std::string mode, layer_.StrAttr("auto_broadcast", "numpy"));
    if (mode == "numpy") return absl::OkStatus();
    if (mode == "none" || mode == "explicit") {
      const auto& da = layer_.inputs[a].dims;
      const auto& db = layer_.inputs[b].dims;
      const bool known = std::none_of(da.begin(), da.end(), [](int64_t d) { return d < 0; }) &&
                         std::none_of(db.begin(), db.end(), [](int64_t d) { return d < 0; });
      if (known && da != db) {
        return layer_.Invalid("auto_broadcast is 'none' but the input shapes differ");
      }
      return absl::OkStatus();
    }
    return layer_.Error(absl::StatusCode::kUnimplemented,
                        absl::StrCat("auto_broadcast '", mode, "' is not supported"));
  }

  absl::Status Binary(const char* onnx) {
    LS_RETURN_IF_ERROR(Ports(2, 2, 1));
    LS_RETURN_IF_ERROR(CheckAutoBroadcast(0, 1));
    if (layer_.type == "Divide" && IsInteger(InType(0))) {
      // Integer Divide floors when m_pythondiv (the default); ONNX Div truncates. With the
      // Python remainder r = Mod(a, b), (a - r) / b is exact, so truncation gives the floor.
      LS_ASSIGN_OR_RETURN(bool python_div, layer_.BoolAttr("m_pythondiv", true));
      if (python_div) {
        const auto& dims = layer_.outputs[0].dims;
        const ValueId r = Temp(InType(0), dims);
        Emit("Mod", {In(0), In(1)}, {r}).attributes["fmod"] = IntAttribute(0);
        const ValueId a = Temp(InType(0), dims);
        Emit("Sub", {In(0), r}, {a});
        Emit("Div", {a, In(1)}, {Out(0)});
        return absl::OkStatus();
      }
    }
    Emit(onnx, {In(0), In(1)}, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status Unary(const char* onnx) {
    LS_RETURN_IF_ERROR(Ports(1, 1, 1));
    Emit(onnx, {In(0)}, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status NotEqual() {
    LS_RETURN_IF_ERROR(Ports(2, 2, 1));
    LS_RETURN_IF_ERROR(CheckAutoBroadcast(0, 1));
    const ValueId eq = Temp(DataType::kBool, layer_.outputs[0].dims);
    Emit("Equal", {In(0), In(1)}, {eq});
    Emit("Not", {eq}, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status MatMul() {
    LS_RETURN_IF_ERROR(Ports(2, 2, 1));
    LS_ASSIGN_OR_RETURN(bool ta, layer_.BoolAttr("transpose_a", false));
    LS_ASSIGN_OR_RETURN(bool tb, layer_.BoolAttr("transpose_b", false));
    std::vector<ValueId> operands = {In(0), In(1)};
    const bool transpose[2] = {ta, tb};
    // transpose_a/b swap the last two dims; they are ignored for 1-D operands.
    for (int i = 0; i < 2; ++i) {
      const int rank = InRank(i);
      if (!transpose[i] || rank < 2) continue;
      std::vector<int64_t> perm(rank);
      for (int d = 0; d < rank; ++d) perm[d] = d;
      std::swap(perm[rank - 1], perm[rank - 2]);
      std::vector<int64_t> dims = layer_.inputs[i].dims;
      std::swap(dims[rank - 1], dims[rank - 2]);
      const ValueId t = Temp(InType(i), dims);
      Emit("Transpose", {operands[i]}, {t}).attributes["perm"] = IntsAttribute(perm);
      operands[i] = t;
    }
    // Emitted last so the MatMul node carries the layer's name when no Transpose precedes it.
    Emit("MatMul", operands, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status Convert() {
    LS_RETURN_IF_ERROR(Ports(1, 1, 1));
    LS_ASSIGN_OR_RETURN(std::string to, layer_.StrAttr("destination_type", std::nullopt));
    absl::StatusOr<DataType> dtype = ParseElementType(to);
    if (!dtype.ok()) return layer_.Error(dtype.status().code(), dtype.status().message());
    if (*dtype == DataType::kUndefined) {
      return layer_.Invalid("destination_type must be a concrete element type");
    }
    Emit("Cast", {In(0)}, {Out(0)}).attributes["to"] = IntAttribute(DataTypeToOnnx(*dtype));
    return absl::OkStatus();
  }

  absl::Status ConvertLike() {
    LS_RETURN_IF_ERROR(Ports(2, 2, 1));
    Emit("CastLike", {In(0), In(1)}, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status Reshape() {
    LS_RETURN_IF_ERROR(Ports(2, 2, 1));
    LS_ASSIGN_OR_RETURN(bool special_zero, layer_.BoolAttr("special_zero", std::nullopt));
    const ValueId shape = AsInt64(1);
    // special_zero: a 0 copies the input dim (ONNX's default); otherwise 0 is a real 0.
    Emit("Reshape", {In(0), shape}, {Out(0)}).attributes["allowzero"] =
        IntAttribute(special_zero ? 0 : 1);
    return absl::OkStatus();
  }

  absl::Status SqueezeOrUnsqueeze(const char* op, int min_inputs) {
    LS_RETURN_IF_ERROR(Ports(min_inputs, 2, 1));
    std::vector<ValueId> inputs = {In(0)};
    if (In(1) != kNoValue) inputs.push_back(AsInt64(1));
    Emit(op, inputs, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status Concat() {
    LS_RETURN_IF_ERROR(Ports(1, 1 << 20, 1));
    LS_ASSIGN_OR_RETURN(int64_t axis, layer_.IntAttr("axis", 0));
    Emit("Concat", values_.inputs, {Out(0)}).attributes["axis"] = IntAttribute(axis);
    return absl::OkStatus();
  }

  absl::Status Split(bool variadic) {
    LS_RETURN_IF_ERROR(Ports(variadic ? 3 : 2, variadic ? 3 : 2, -1));
    Node& node = Emit("ov:Split", values_.inputs, values_.outputs);
    if (!variadic) {
      LS_ASSIGN_OR_RETURN(int64_t n, layer_.IntAttr("num_splits", std::nullopt));
      if (n != static_cast<int64_t>(layer_.outputs.size())) {
        return layer_.Invalid(absl::StrCat("num_splits is ", n, " but the layer has ",
                                           layer_.outputs.size(), " output ports"));
      }
      node.attributes["num_splits"] = IntAttribute(n);
    }
    return absl::OkStatus();
  }

  absl::Status StridedSlice() {
    LS_RETURN_IF_ERROR(Ports(3, 4, 1));
    std::vector<std::pair<const char*, std::vector<int64_t>>> masks;
    for (const char* mask :
         {"begin_mask", "end_mask", "new_axis_mask", "shrink_axis_mask", "ellipsis_mask"}) {
      const bool required = std::string(mask) == "begin_mask" || std::string(mask) == "end_mask";
      LS_ASSIGN_OR_RETURN(std::vector<int64_t> bits,
                          layer_.IntsAttr(mask, required ? std::nullopt
                                                         : std::optional<std::vector<int64_t>>(
                                                               std::vector<int64_t>{})));
      masks.emplace_back(mask, std::move(bits));
    }
    Node& n = Emit("ov:StridedSlice", values_.inputs, {Out(0)});
    for (auto& [name, bits] : masks) n.attributes[name] = IntsAttribute(std::move(bits));
    return absl::OkStatus();
  }

  absl::Status Slice() {
    LS_RETURN_IF_ERROR(Ports(4, 5, 1));
    // OpenVINO Slice-8 (data, start, stop, step[, axes]) is ONNX Slice (data, starts, ends,
    // axes, steps).
    std::vector<ValueId> inputs = {In(0), AsInt64(1), AsInt64(2), AsInt64(4), AsInt64(3)};
    Emit("Slice", inputs, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status Gather() {
    LS_RETURN_IF_ERROR(Ports(3, 3, 1));
    LS_ASSIGN_OR_RETURN(int64_t batch_dims, layer_.IntAttr("batch_dims", 0));
    auto axis = constants_.find(In(2));
    if (batch_dims == 0 && axis != constants_.end() && axis->second->NumElements() == 1 &&
        IsInteger(axis->second->dtype())) {
      Emit("Gather", {In(0), In(1)}, {Out(0)}).attributes["axis"] =
          IntAttribute(axis->second->ScalarAsInt64());
      return absl::OkStatus();
    }
    Emit("ov:Gather", values_.inputs, {Out(0)}).attributes["batch_dims"] = IntAttribute(batch_dims);
    return absl::OkStatus();
  }

  absl::Status ShapeOf() {
    LS_RETURN_IF_ERROR(Ports(1, 1, 1));
    LS_ASSIGN_OR_RETURN(std::string type, layer_.StrAttr("output_type", "i64"));
    absl::StatusOr<DataType> dtype = ParseElementType(type);
    if (!dtype.ok() || !(*dtype == DataType::kInt64 || *dtype == DataType::kInt32)) {
      return layer_.Invalid(absl::StrCat("output_type '", type, "' must be i32 or i64"));
    }
    if (*dtype == DataType::kInt64) {
      Emit("Shape", {In(0)}, {Out(0)});
      return absl::OkStatus();
    }
    const ValueId shape = Temp(DataType::kInt64, layer_.outputs[0].dims);
    Emit("Shape", {In(0)}, {shape});
    Emit("Cast", {shape}, {Out(0)}).attributes["to"] = IntAttribute(DataTypeToOnnx(*dtype));
    return absl::OkStatus();
  }

  absl::Status Broadcast() {
    LS_RETURN_IF_ERROR(Ports(2, 3, 1));
    LS_ASSIGN_OR_RETURN(std::string mode, layer_.StrAttr("mode", "numpy"));
    const ValueId target = AsInt64(1);
    if (mode == "numpy" || mode == "bidirectional") {
      // For shapes numpy mode accepts, ONNX Expand (bidirectional) gives the same result.
      Emit("Expand", {In(0), target}, {Out(0)});
      return absl::OkStatus();
    }
    if (mode != "explicit") {
      return layer_.Error(absl::StatusCode::kUnimplemented,
                          absl::StrCat("mode '", mode, "' is not supported"));
    }
    // explicit: data dim k goes to output axis axes_mapping[k]; the other output axes are new.
    // That is Unsqueeze(data, other axes) followed by Expand.
    if (In(2) == kNoValue) return layer_.Invalid("mode 'explicit' needs the axes_mapping input");
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> mapping, ConstInts(2, "axes_mapping"));
    if (layer_.inputs[1].dims.size() != 1 || layer_.inputs[1].dims[0] < 0) {
      return layer_.Error(absl::StatusCode::kUnimplemented,
                          "mode 'explicit' needs a target_shape of static length");
    }
    const int64_t rank = layer_.inputs[1].dims[0];
    if (static_cast<int>(mapping.size()) != InRank(0) ||
        !std::is_sorted(mapping.begin(), mapping.end()) ||
        std::adjacent_find(mapping.begin(), mapping.end()) != mapping.end() ||
        (!mapping.empty() && (mapping.front() < 0 || mapping.back() >= rank))) {
      return layer_.Invalid("axes_mapping must list one increasing output axis per data dim");
    }
    std::vector<int64_t> new_axes;
    for (int64_t a = 0; a < rank; ++a) {
      if (!std::binary_search(mapping.begin(), mapping.end(), a)) new_axes.push_back(a);
    }
    ValueId data = In(0);
    if (!new_axes.empty()) {
      Tensor axes(DataType::kInt64, Shape{static_cast<int64_t>(new_axes.size())});
      std::copy(new_axes.begin(), new_axes.end(), axes.mutable_data<int64_t>());
      const ValueId axes_value = Temp(DataType::kInt64, std::vector<int64_t>{axes.dim(0)});
      graph_.constants.emplace_back(axes_value, std::make_shared<const Tensor>(std::move(axes)));
      const ValueId unsqueezed = Temp(InType(0), std::nullopt);
      Emit("Unsqueeze", {data, axes_value}, {unsqueezed});
      data = unsqueezed;
    }
    Emit("Expand", {data, target}, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status Softmax() {
    LS_RETURN_IF_ERROR(Ports(1, 1, 1));
    LS_ASSIGN_OR_RETURN(int64_t axis, layer_.IntAttr("axis", 1));
    Emit("Softmax", {In(0)}, {Out(0)}).attributes["axis"] = IntAttribute(axis);
    return absl::OkStatus();
  }

  absl::Status Reduce() {
    LS_RETURN_IF_ERROR(Ports(2, 2, 1));
    LS_ASSIGN_OR_RETURN(bool keep_dims, layer_.BoolAttr("keep_dims", false));
    Node& node = Emit(layer_.type, {In(0), AsInt64(1)}, {Out(0)});
    node.attributes["keepdims"] = IntAttribute(keep_dims ? 1 : 0);
    // An empty axes list reduces nothing in OpenVINO.
    node.attributes["noop_with_empty_axes"] = IntAttribute(1);
    return absl::OkStatus();
  }

  // FakeQuantize-1: y = output_low for x <= min(input_low, input_high), output_high for
  // x > max(input_low, input_high), else round((x - il) / (ih - il) * (L - 1)) / (L - 1) *
  // (oh - ol) + ol, the four ranges broadcast to x. The int8 form of OpenVINO's low-precision
  // transformations where it applies (QuantizeOnConstant / QuantizeOnActivation below), the
  // formula in ONNX element-wise ops otherwise.
  absl::Status FakeQuantize() {
    LS_RETURN_IF_ERROR(Ports(5, 5, 1));
    LS_ASSIGN_OR_RETURN(const int64_t levels, layer_.IntAttr("levels", std::nullopt));
    if (levels < 2 || levels > (int64_t{1} << 24)) {
      return layer_.Invalid(absl::StrCat("levels ", levels, " must be from 2 to 2^24"));
    }
    for (int i = 1; i < 5; ++i) LS_RETURN_IF_ERROR(CheckAutoBroadcast(0, i));
    if (InType(0) != DataType::kFloat32) {
      return layer_.Error(
          absl::StatusCode::kUnimplemented,
          absl::StrCat("data of type ", DataTypeName(InType(0)), " (only f32 is supported)"));
    }
    for (int i = 1; i < 5; ++i) {
      if (InType(i) != DataType::kFloat32) {
        return layer_.Invalid(absl::StrCat("range input ", i, " has type ", DataTypeName(InType(i)),
                                           ", expected f32 like the data"));
      }
    }
    if (std::optional<Tensor> weight = ConstantData()) {
      if (std::optional<QuantGrid> grid = Int8Grid(levels, /*same_ranges=*/false)) {
        return QuantizeOnConstant(*weight, levels, *grid);
      }
    } else if (levels == 256) {
      if (std::optional<QuantGrid> grid = Int8Grid(levels, /*same_ranges=*/true)) {
        return QuantizeOnActivation(*grid);
      }
    }
    return FakeQuantizeFormula(levels);
  }

  // The data input's value when it is a float32 constant, or the Convert to float32 of an 8-bit
  // constant (POT's and NNCF's compressed weights: i8 Const -> Convert -> FakeQuantize from
  // [-128, 127] to the float range); nullopt otherwise.
  std::optional<Tensor> ConstantData() {
    auto it = constants_.find(In(0));
    if (it != constants_.end()) {
      if (it->second->dtype() != DataType::kFloat32) return std::nullopt;
      return Tensor::ViewOf(*it->second);
    }
    for (auto node = graph_.nodes.rbegin(); node != graph_.nodes.rend(); ++node) {
      if (node->outputs.size() != 1 || node->outputs[0] != In(0)) continue;
      if (node->op_type != "Cast" || node->inputs.size() != 1) return std::nullopt;
      auto q = constants_.find(node->inputs[0]);
      if (q == constants_.end() || DataTypeSize(q->second->dtype()) != 1 ||
          !IsInteger(q->second->dtype())) {
        return std::nullopt;
      }
      Tensor data(DataType::kFloat32, q->second->shape());
      const bool u8 = q->second->dtype() == DataType::kUint8;
      for (int64_t e = 0; e < data.NumElements(); ++e) {
        data.mutable_data<float>()[e] =
            u8 ? q->second->data<uint8_t>()[e] : q->second->data<int8_t>()[e];
      }
      return data;
    }
    return std::nullopt;
  }

  // The quantization grid of a FakeQuantize whose ranges are constant, input_low < input_high,
  // output_low < output_high with zero on the output grid's 8-bit range, and (`same_ranges`, for
  // an activation) the output range equal to the input range (what NNCF writes):
  // y = (q - zero_point) * scale per channel of one axis (or per tensor), q in [0, 255], where
  // the level q of x comes from the input range [low, high] and scale, zero_point from the
  // output range.
  struct QuantGrid {
    std::vector<float> low, high, scale;
    std::vector<int> zero_point;  // uint8 domain
    int64_t axis = -1;            // of the data; -1: per tensor
  };

  std::optional<QuantGrid> Int8Grid(int64_t levels, bool same_ranges) {
    if (levels != 255 && levels != 256) return std::nullopt;
    const Tensor* range[4];
    for (int i = 0; i < 4; ++i) {
      auto it = constants_.find(In(i + 1));
      if (it == constants_.end() || it->second->dtype() != DataType::kFloat32) return std::nullopt;
      range[i] = it->second.get();
    }
    const Shape& shape = range[0]->shape();
    for (int i = 1; i < 4; ++i) {
      if (range[i]->shape() != shape) return std::nullopt;
    }
    QuantGrid grid;
    const int data_rank = InRank(0);
    const int rank = shape.rank();
    if (rank > data_rank) return std::nullopt;
    for (int d = 0; d < rank; ++d) {
      if (shape[d] == 1) continue;
      if (grid.axis >= 0) return std::nullopt;  // ranges along two axes
      grid.axis = data_rank - rank + d;
    }
    const int64_t n = range[0]->NumElements();
    for (int64_t c = 0; c < n; ++c) {
      const float il = range[0]->data<float>()[c], ih = range[1]->data<float>()[c];
      const float ol = range[2]->data<float>()[c], oh = range[3]->data<float>()[c];
      if (same_ranges && (il != ol || ih != oh)) return std::nullopt;
      if (!(il < ih) || !std::isfinite(il) || !std::isfinite(ih)) return std::nullopt;
      if (!(ol < oh) || !std::isfinite(ol) || !std::isfinite(oh)) return std::nullopt;
      const float scale = (oh - ol) / static_cast<float>(levels - 1);
      // The grid ol + k * scale holds zero (k = -ol / scale) for NNCF's and POT's ranges; off
      // the grid the nearest point serves, within half a step.
      const double zero = std::nearbyint(-static_cast<double>(ol) / scale);
      if (zero < 0 || zero > levels - 1) return std::nullopt;
      grid.low.push_back(il);
      grid.high.push_back(ih);
      grid.scale.push_back(scale);
      grid.zero_point.push_back(static_cast<int>(zero));
    }
    return grid;
  }

  ValueId AddConstant(Tensor tensor) {
    std::vector<int64_t> dims(tensor.shape().dims().begin(), tensor.shape().dims().end());
    const ValueId v = Temp(tensor.dtype(), std::move(dims));
    graph_.constants.emplace_back(v, std::make_shared<const Tensor>(std::move(tensor)));
    return v;
  }

  // The grid's scale (float32) and zero point (`zp_type`, shifted by `zp_shift`) as constants,
  // scalars per tensor, [C] per axis.
  std::pair<ValueId, ValueId> GridConstants(const QuantGrid& grid, DataType zp_type, int zp_shift) {
    const Shape shape = grid.axis < 0 ? Shape{} : Shape{static_cast<int64_t>(grid.scale.size())};
    Tensor scale(DataType::kFloat32, shape);
    Tensor zero_point(zp_type, shape);
    for (size_t c = 0; c < grid.scale.size(); ++c) {
      scale.mutable_data<float>()[c] = grid.scale[c];
      if (zp_type == DataType::kInt8) {
        zero_point.mutable_data<int8_t>()[c] = static_cast<int8_t>(grid.zero_point[c] + zp_shift);
      } else {
        zero_point.mutable_data<uint8_t>()[c] = static_cast<uint8_t>(grid.zero_point[c] + zp_shift);
      }
    }
    return {AddConstant(std::move(scale)), AddConstant(std::move(zero_point))};
  }

  // A FakeQuantize on constant weights: folded at load into an int8 constant and its
  // DequantizeLinear (k = the level of each weight by the formula, stored as k - 128 with zero
  // point zp - 128), which fold_qdq folds into the product that reads it.
  absl::Status QuantizeOnConstant(const Tensor& data, int64_t levels, const QuantGrid& grid) {
    // The grid was read against the port's rank: a constant of another shape (a hostile IR)
    // takes the formula, which checks the broadcast when it runs.
    const int64_t grid_channels = static_cast<int64_t>(grid.scale.size());
    if (data.dtype() != DataType::kFloat32 || data.rank() != InRank(0) ||
        (grid.axis >= 0 ? data.dim(static_cast<int>(grid.axis)) != grid_channels
                        : grid_channels != 1)) {
      return FakeQuantizeFormula(levels);
    }
    Tensor q(DataType::kInt8, data.shape());
    const int64_t n = data.NumElements();
    int64_t inner = 1, channels = 1;
    if (grid.axis >= 0) {
      channels = data.dim(static_cast<int>(grid.axis));
      for (int d = static_cast<int>(grid.axis) + 1; d < data.rank(); ++d) inner *= data.dim(d);
    }
    for (int64_t e = 0; e < n; ++e) {
      const int64_t c = grid.axis < 0 ? 0 : (e / inner) % channels;
      const float x = data.data<float>()[e];
      const float il = grid.low[c], ih = grid.high[c];
      int64_t k;
      if (x <= il) {
        k = 0;
      } else if (x > ih) {
        k = levels - 1;
      } else {
        k = static_cast<int64_t>(std::nearbyint((x - il) / (ih - il) * (levels - 1)));
      }
      q.mutable_data<int8_t>()[e] = static_cast<int8_t>(k - 128);
    }
    const ValueId q_value = AddConstant(std::move(q));
    const auto [scale, zero_point] = GridConstants(grid, DataType::kInt8, -128);
    Node& dq = Emit("DequantizeLinear", {q_value, scale, zero_point}, {Out(0)});
    if (grid.axis >= 0) dq.attributes["axis"] = IntAttribute(grid.axis);
    return absl::OkStatus();
  }

  // A FakeQuantize of 256 levels on an activation: QuantizeLinear to uint8 and back, the pair
  // fold_qdq folds into the integer product that follows (MatMul, Gemm). Equal to the formula up
  // to the rounding of ties (half to even here) and the grid's offset when zero is off it.
  absl::Status QuantizeOnActivation(const QuantGrid& grid) {
    const auto [scale, zero_point] = GridConstants(grid, DataType::kUint8, 0);
    const ValueId q = Temp(DataType::kUint8, layer_.inputs[0].dims);
    Node& quantize = Emit("QuantizeLinear", {In(0), scale, zero_point}, {q});
    if (grid.axis >= 0) quantize.attributes["axis"] = IntAttribute(grid.axis);
    Node& dequantize = Emit("DequantizeLinear", {q, scale, zero_point}, {Out(0)});
    if (grid.axis >= 0) dequantize.attributes["axis"] = IntAttribute(grid.axis);
    return absl::OkStatus();
  }

  // The spec's formula in ONNX element-wise ops (any levels, ranges constant or not).
  absl::Status FakeQuantizeFormula(int64_t levels) {
    const ValueId x = In(0), il = In(1), ih = In(2), ol = In(3), oh = In(4);
    auto temp = [&] { return Temp(DataType::kFloat32, std::nullopt); };
    auto binary = [&](const char* op, ValueId a, ValueId b) {
      const ValueId out = temp();
      Emit(op, {a, b}, {out});
      return out;
    };
    Tensor steps(DataType::kFloat32, Shape{});
    steps.mutable_data<float>()[0] = static_cast<float>(levels - 1);
    const ValueId steps_value = AddConstant(std::move(steps));
    const ValueId below = Temp(DataType::kBool, std::nullopt);
    Emit("LessOrEqual", {x, binary("Min", il, ih)}, {below});
    const ValueId above = Temp(DataType::kBool, std::nullopt);
    Emit("Greater", {x, binary("Max", il, ih)}, {above});
    const ValueId t =
        binary("Mul", binary("Div", binary("Sub", x, il), binary("Sub", ih, il)), steps_value);
    const ValueId rounded = temp();
    Emit("Round", {t}, {rounded});
    const ValueId inside = binary(
        "Add", binary("Mul", binary("Div", rounded, steps_value), binary("Sub", oh, ol)), ol);
    const ValueId upper = temp();
    Emit("Where", {above, oh, inside}, {upper});
    Emit("Where", {below, ol, upper}, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status Select() {
    LS_RETURN_IF_ERROR(Ports(3, 3, 1));
    LS_ASSIGN_OR_RETURN(std::string mode, layer_.StrAttr("auto_broadcast", "numpy"));
    if (mode == "none") {
      LS_RETURN_IF_ERROR(CheckAutoBroadcast(1, 2));
      LS_RETURN_IF_ERROR(CheckAutoBroadcast(0, 1));
    } else if (mode != "numpy") {
      return layer_.Error(absl::StatusCode::kUnimplemented,
                          absl::StrCat("auto_broadcast '", mode, "' is not supported"));
    }
    Emit("Where", {In(0), In(1), In(2)}, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status Range() {
    LS_RETURN_IF_ERROR(Ports(3, 3, 1));
    std::vector<ValueId> inputs = {In(0), In(1), In(2)};
    // Range-4 casts its operands to output_type; Range-0 requires one type already.
    if (layer_.data.attribute("output_type")) {
      LS_ASSIGN_OR_RETURN(std::string type, layer_.StrAttr("output_type", std::nullopt));
      absl::StatusOr<DataType> dtype = ParseElementType(type);
      if (!dtype.ok() || *dtype == DataType::kUndefined) {
        return layer_.Invalid(absl::StrCat("output_type '", type, "' is not supported"));
      }
      for (int i = 0; i < 3; ++i) {
        if (InType(i) != *dtype) inputs[i] = CastTo(inputs[i], *dtype, layer_.inputs[i].dims);
      }
    }
    Emit("Range", inputs, {Out(0)});
    return absl::OkStatus();
  }

  absl::Status Transpose() {
    LS_RETURN_IF_ERROR(Ports(2, 2, 1));
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> order, ConstInts(1, "input_order"));
    Node& node = Emit("Transpose", {In(0)}, {Out(0)});
    // An empty order reverses the dims, as ONNX does without perm.
    if (!order.empty()) node.attributes["perm"] = IntsAttribute(std::move(order));
    return absl::OkStatus();
  }

  // RNNCell-3, GRUCell-3, LSTMCell-1/-4 and RNN/GRU/LSTMSequence-5 (LSTMSequence-1 too) become
  // the ONNX op of their cell with the inputs in ONNX's order and attributes the kernel reads to
  // take OpenVINO's layouts (_layout), gate order (_gate_order: "fico"; LSTMCell-1's
  // weights_format, "ifco" when absent as OpenVINO's IR reader defaults it) and per-gate summed
  // biases (_bias_summed). The gate order is converted when the kernel packs the weights, once,
  // at load.
  absl::Status Recurrent() {
    const std::string& t = layer_.type;
    const bool sequence = absl::EndsWith(t, "Sequence");
    const std::string op = absl::StartsWith(t, "LSTM")  ? "LSTM"
                           : absl::StartsWith(t, "GRU") ? "GRU"
                                                        : "RNN";
    const bool lstm = op == "LSTM";
    const bool v0 = layer_.version == "opset1";
    // OpenVINO port -> ONNX input slot (X, W, R, B, sequence_lens, initial_h, initial_c, P).
    std::vector<int> slot_of_port;
    if (sequence) {
      slot_of_port =
          lstm ? std::vector<int>{0, 5, 6, 4, 1, 2, 3, 7} : std::vector<int>{0, 5, 4, 1, 2, 3};
    } else {
      slot_of_port = lstm ? std::vector<int>{0, 5, 6, 1, 2, 3, 7} : std::vector<int>{0, 5, 1, 2, 3};
    }
    // Required: everything up to R; then B (and LSTMCell-1's / LSTMSequence-1's P) are optional.
    const int required = static_cast<int>(slot_of_port.size()) - (lstm ? 2 : 1);
    const int max_inputs = static_cast<int>(slot_of_port.size()) - (lstm && !v0 ? 1 : 0);
    const int outputs = sequence ? (lstm ? 3 : 2) : (lstm ? 2 : 1);
    LS_RETURN_IF_ERROR(Ports(required, max_inputs, outputs));
    std::vector<ValueId> inputs(lstm ? 8 : 6, kNoValue);
    for (size_t port = 0; port < layer_.inputs.size(); ++port) {
      inputs[slot_of_port[port]] = In(static_cast<int>(port));
    }
    std::vector<ValueId> outs = values_.outputs;
    if (!sequence) outs.insert(outs.begin(), kNoValue);  // a cell has no Y
    Node& node = Emit(op, std::move(inputs), std::move(outs));

    LS_ASSIGN_OR_RETURN(int64_t hidden, layer_.IntAttr("hidden_size", std::nullopt));
    node.attributes["hidden_size"] = IntAttribute(hidden);
    LS_ASSIGN_OR_RETURN(std::vector<std::string> activations,
                        layer_.StringsAttr("activations", std::vector<std::string>{}));
    LS_ASSIGN_OR_RETURN(std::vector<float> alpha,
                        layer_.FloatsAttr("activations_alpha", std::vector<float>{}));
    LS_ASSIGN_OR_RETURN(std::vector<float> beta,
                        layer_.FloatsAttr("activations_beta", std::vector<float>{}));
    LS_ASSIGN_OR_RETURN(float clip, layer_.FloatAttr("clip", 0.0f));
    if (!activations.empty()) {
      Attribute a;
      a.type = Attribute::Type::kStrings;
      a.strings = std::move(activations);
      node.attributes["activations"] = std::move(a);
    }
    for (auto& [name, list] :
         {std::pair{"activation_alpha", &alpha}, std::pair{"activation_beta", &beta}}) {
      if (list->empty()) continue;
      Attribute a;
      a.type = Attribute::Type::kFloats;
      a.floats = *list;
      node.attributes[name] = std::move(a);
    }
    if (clip < 0) return layer_.Invalid(absl::StrCat("clip ", clip, " is negative"));
    if (clip > 0) {
      Attribute a;
      a.type = Attribute::Type::kFloat;
      a.f = clip;
      node.attributes["clip"] = std::move(a);
    }
    if (sequence) {
      LS_ASSIGN_OR_RETURN(std::string direction, layer_.StrAttr("direction", std::nullopt));
      direction = absl::AsciiStrToLower(direction);
      if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
        return layer_.Invalid(absl::StrCat("direction '", direction, "' is not valid"));
      }
      Attribute a;
      a.type = Attribute::Type::kString;
      a.s = direction;
      node.attributes["direction"] = std::move(a);
    }
    if (op == "GRU") {
      LS_ASSIGN_OR_RETURN(bool lbr, layer_.BoolAttr("linear_before_reset", false));
      node.attributes["linear_before_reset"] = IntAttribute(lbr ? 1 : 0);
    }
    std::string gate_order = lstm ? "fico" : op == "GRU" ? "zrh" : "i";
    if (lstm && v0) {
      LS_ASSIGN_OR_RETURN(bool input_forget, layer_.BoolAttr("input_forget", false));
      node.attributes["input_forget"] = IntAttribute(input_forget ? 1 : 0);
      LS_ASSIGN_OR_RETURN(gate_order, layer_.StrAttr("weights_format", "ifco"));
      gate_order = absl::AsciiStrToLower(gate_order);
      if (gate_order != "fico" && gate_order != "icof" && gate_order != "ifco" &&
          gate_order != "ifoc" && gate_order != "iofc") {
        return layer_.Invalid(absl::StrCat("weights_format '", gate_order, "' is not valid"));
      }
    }
    Attribute order;
    order.type = Attribute::Type::kString;
    order.s = gate_order;
    node.attributes["_gate_order"] = std::move(order);
    node.attributes["_layout"] =
        IntAttribute(sequence ? kRecurrentLayoutSequence : kRecurrentLayoutCell);
    node.attributes["_bias_summed"] = IntAttribute(1);
    return absl::OkStatus();
  }

  const IrLayer& layer_;
  const LayerValues& values_;
  const ConstantMap& constants_;
  Graph& graph_;
  int emitted_ = 0;
  int temps_ = 0;
};

}  // namespace

absl::Status LowerLayer(const IrLayer& layer, const LayerValues& values,
                        const ConstantMap& constants, Graph& graph) {
  Lowerer lowerer(layer, values, constants, graph);
  return lowerer.Lower();
}

namespace {

// The axis of an 8-bit tensor of rank `rank` along which a factor of shape `shape` varies
// (broadcast from the right): -1 for one element, nullopt when it varies along two axes or does
// not broadcast.
std::optional<int64_t> FactorAxis(const Shape& shape, int rank, const Shape& q_shape) {
  if (shape.rank() > rank) return std::nullopt;
  int64_t axis = -1;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    const int64_t a = rank - shape.rank() + d;
    if (axis >= 0 || shape[d] != q_shape[static_cast<int>(a)]) return std::nullopt;
    axis = a;
  }
  return axis;
}

// What FoldWeightDecompression matches against: the graph's constants, each value's producer and
// how often it is read (graph outputs count as two reads, so they are never folded away).
class FoldIndex {
 public:
  explicit FoldIndex(const Graph& graph)
      : graph_(graph), producer_(graph.values.size(), -1), uses_(graph.values.size(), 0) {
    for (const auto& [v, t] : graph.constants) constants_[v] = t.get();
    for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
      for (ValueId v : graph.nodes[n].outputs) {
        if (v != kNoValue) producer_[v] = n;
      }
      for (ValueId v : graph.nodes[n].inputs) {
        if (v != kNoValue) ++uses_[v];
      }
    }
    for (ValueId v : graph.outputs) uses_[v] += 2;
  }

  const Tensor* Constant(ValueId v) const {
    auto it = constants_.find(v);
    return it == constants_.end() ? nullptr : it->second;
  }
  void AddConstant(ValueId v, const Tensor* t) { constants_[v] = t; }

  // The node producing `v` when it is a one-input, one-output `op` read only once; -1 otherwise.
  int Single(ValueId v, const char* op) const {
    if (v == kNoValue || static_cast<size_t>(v) >= producer_.size() || producer_[v] < 0 ||
        uses_[v] != 1)
      return -1;
    const Node& node = graph_.nodes[producer_[v]];
    return node.op_type == op && node.domain.empty() ? producer_[v] : -1;
  }

  // The constant a Cast to float32 reads, when it is one (and the Cast is read once); the Cast's
  // node index goes to `*cast` (-1 when `v` is not such a Cast).
  const Tensor* CastOfConstant(ValueId v, int* cast) const {
    *cast = Single(v, "Cast");
    if (*cast < 0 || graph_.nodes[*cast].inputs.size() != 1) return nullptr;
    absl::StatusOr<int64_t> to = graph_.nodes[*cast].GetInt("to", std::nullopt);
    if (!to.ok() || *to != DataTypeToOnnx(DataType::kFloat32)) return nullptr;
    return Constant(graph_.nodes[*cast].inputs[0]);
  }

 private:
  const Graph& graph_;
  absl::flat_hash_map<ValueId, const Tensor*> constants_;
  std::vector<int> producer_;
  std::vector<int> uses_;
};

// DequantizeLinear's scale and zero point (one element, or one per channel along `axis`).
struct DequantizeFactors {
  Tensor scales;
  Tensor zero_points;
  int64_t axis = -1;  // -1: per tensor
};

// The factors of (q - zp) * scale as DequantizeLinear reads them; nullopt when scale and zero point
// vary along different axes or a zero point is not an integer in q's type.
std::optional<DequantizeFactors> FactorsOf(const Tensor& q, const Tensor& scale, const Tensor& zp) {
  const std::optional<int64_t> scale_axis = FactorAxis(scale.shape(), q.rank(), q.shape());
  const std::optional<int64_t> zp_axis = FactorAxis(zp.shape(), q.rank(), q.shape());
  if (!scale_axis || !zp_axis || (*zp_axis >= 0 && *scale_axis >= 0 && *zp_axis != *scale_axis)) {
    return std::nullopt;
  }
  const int64_t axis = std::max(*scale_axis, *zp_axis);
  const int64_t channels = axis < 0 ? 1 : q.dim(static_cast<int>(axis));
  const Shape shape = axis < 0 ? Shape{} : Shape{channels};
  DequantizeFactors factors{Tensor(DataType::kFloat32, shape), Tensor(q.dtype(), shape), axis};
  const bool u8 = q.dtype() == DataType::kUint8;
  for (int64_t c = 0; c < channels; ++c) {
    factors.scales.mutable_data<float>()[c] = scale.data<float>()[*scale_axis < 0 ? 0 : c];
    const int64_t zc = *zp_axis < 0 ? 0 : c;
    double z = zp.dtype() == DataType::kFloat32 ? zp.data<float>()[zc]
               : zp.dtype() == DataType::kUint8 ? zp.data<uint8_t>()[zc]
                                                : zp.data<int8_t>()[zc];
    if (z != std::nearbyint(z) || z < (u8 ? 0 : -128) || z > (u8 ? 255 : 127)) return std::nullopt;
    if (u8) {
      factors.zero_points.mutable_data<uint8_t>()[c] = static_cast<uint8_t>(z);
    } else {
      factors.zero_points.mutable_data<int8_t>()[c] = static_cast<int8_t>(z);
    }
  }
  return factors;
}

// Rewrites `mul` = (Cast(q) - zp) * scale, q a constant 8-bit weight, into DequantizeLinear(q,
// scale, zp) and marks the Sub and Casts it absorbed in `removed`. Leaves `mul` alone (returning
// without effect) when it does not match.
void FoldDecompressionMul(Node& mul, FoldIndex& index, Graph& graph, std::vector<bool>& removed) {
  if (mul.op_type != "Mul" || !mul.domain.empty() || mul.inputs.size() != 2 ||
      mul.outputs.size() != 1) {
    return;
  }
  const int side = index.Constant(mul.inputs[1]) != nullptr ? 1 : 0;
  const Tensor* scale = index.Constant(mul.inputs[side]);
  const int sub = index.Single(mul.inputs[1 - side], "Sub");
  if (scale == nullptr || scale->dtype() != DataType::kFloat32 || sub < 0 ||
      graph.nodes[sub].inputs.size() != 2) {
    return;
  }
  int q_cast = -1, zp_cast = -1;
  const Tensor* q = index.CastOfConstant(graph.nodes[sub].inputs[0], &q_cast);
  if (q == nullptr || (q->dtype() != DataType::kUint8 && q->dtype() != DataType::kInt8)) return;
  const Tensor* zp = index.Constant(graph.nodes[sub].inputs[1]);
  if (zp == nullptr) zp = index.CastOfConstant(graph.nodes[sub].inputs[1], &zp_cast);
  if (zp == nullptr || (zp->dtype() != DataType::kFloat32 && zp->dtype() != q->dtype())) return;
  std::optional<DequantizeFactors> factors = FactorsOf(*q, *scale, *zp);
  if (!factors) return;
  auto add_constant = [&](Tensor t, const char* what) {
    ValueType type;
    type.dtype = t.dtype();
    type.dims = std::vector<int64_t>(t.shape().dims().begin(), t.shape().dims().end());
    const ValueId v = graph.AddValue(absl::StrCat(mul.name, "/", what), std::move(type));
    graph.constants.emplace_back(v, std::make_shared<const Tensor>(std::move(t)));
    index.AddConstant(v, graph.constants.back().second.get());  // for the Transpose fold
    return v;
  };
  const ValueId q_value = graph.nodes[q_cast].inputs[0];
  const ValueId scale_value = add_constant(std::move(factors->scales), "scale");
  const ValueId zp_value = add_constant(std::move(factors->zero_points), "zero_point");
  mul.op_type = "DequantizeLinear";
  mul.opset = kOnnxOpset;
  mul.inputs = {q_value, scale_value, zp_value};
  mul.attributes.clear();
  if (factors->axis >= 0) mul.attributes["axis"] = IntAttribute(factors->axis);
  removed[sub] = removed[q_cast] = true;
  if (zp_cast >= 0) removed[zp_cast] = true;
}

// The 1-byte-element tensor `q` transposed by `perm` (a permutation of q's axes).
Tensor TransposeBytes(const Tensor& q, const std::vector<int64_t>& perm) {
  const int rank = q.rank();
  std::vector<int64_t> dims(rank), from_strides(rank);
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    from_strides[d] = stride;
    stride *= q.dim(d);
  }
  for (int j = 0; j < rank; ++j) dims[j] = q.dim(static_cast<int>(perm[j]));
  Tensor transposed(q.dtype(), Shape(absl::MakeConstSpan(dims)));
  const uint8_t* from = static_cast<const uint8_t*>(q.raw_data());
  uint8_t* to = static_cast<uint8_t*>(transposed.mutable_raw_data());
  std::vector<int64_t> index(rank, 0);
  for (int64_t e = 0; e < q.NumElements(); ++e) {
    int64_t offset = 0;
    for (int j = 0; j < rank; ++j) offset += index[j] * from_strides[perm[j]];
    to[e] = from[offset];
    for (int j = rank - 1; j >= 0 && ++index[j] == dims[j]; --j) index[j] = 0;
  }
  return transposed;
}

// MatMul's transpose_b lowered to a Transpose of the weight: the Transpose of a constant's
// DequantizeLinear becomes the DequantizeLinear of the transposed constant (NNCF quantizes a
// Linear's [N, K] weight per output row), so the product still sees DQ(constant). Marks the
// absorbed DequantizeLinear in `removed`; leaves `transpose` alone when it does not match.
void FoldDequantizeTranspose(Node& transpose, const FoldIndex& index, Graph& graph,
                             std::vector<bool>& removed) {
  if (transpose.op_type != "Transpose" || !transpose.domain.empty() ||
      transpose.inputs.size() != 1 || transpose.outputs.size() != 1) {
    return;
  }
  const int dq = index.Single(transpose.inputs[0], "DequantizeLinear");
  if (dq < 0 || removed[dq] || graph.nodes[dq].inputs.size() != 3) return;
  const Node& dequantize = graph.nodes[dq];
  const Tensor* q = index.Constant(dequantize.inputs[0]);
  const Tensor* scale = index.Constant(dequantize.inputs[1]);
  if (q == nullptr || scale == nullptr || DataTypeSize(q->dtype()) != 1 || q->rank() < 1 ||
      scale->rank() > 1) {
    return;
  }
  const int rank = q->rank();
  std::vector<int64_t> reversed(rank);
  for (int d = 0; d < rank; ++d) reversed[d] = rank - 1 - d;
  absl::StatusOr<std::vector<int64_t>> perm = transpose.GetInts("perm", reversed);
  absl::StatusOr<int64_t> axis = dequantize.GetInt("axis", 1);
  if (!perm.ok() || !axis.ok() || static_cast<int>(perm->size()) != rank) return;
  std::vector<int64_t> sorted = *perm;
  std::sort(sorted.begin(), sorted.end());
  if (!std::equal(sorted.begin(), sorted.end(), reversed.rbegin())) return;  // no permutation
  if (*axis < 0) *axis += rank;
  int64_t new_axis = 0;
  for (int j = 0; j < rank; ++j) {
    if ((*perm)[j] == *axis) new_axis = j;
  }
  Tensor transposed = TransposeBytes(*q, *perm);
  ValueType type;
  type.dtype = q->dtype();
  type.dims =
      std::vector<int64_t>(transposed.shape().dims().begin(), transposed.shape().dims().end());
  const ValueId q_value = graph.AddValue(absl::StrCat(transpose.name, "/q"), std::move(type));
  graph.constants.emplace_back(q_value, std::make_shared<const Tensor>(std::move(transposed)));
  transpose.op_type = "DequantizeLinear";
  transpose.opset = kOnnxOpset;
  transpose.inputs = {q_value, dequantize.inputs[1], dequantize.inputs[2]};
  transpose.attributes.clear();
  if (scale->NumElements() > 1) transpose.attributes["axis"] = IntAttribute(new_axis);
  removed[dq] = true;
}

}  // namespace

void FoldWeightDecompression(Graph& graph) {
  FoldIndex index(graph);
  std::vector<bool> removed(graph.nodes.size(), false);
  for (Node& mul : graph.nodes) FoldDecompressionMul(mul, index, graph, removed);
  for (Node& transpose : graph.nodes) FoldDequantizeTranspose(transpose, index, graph, removed);
  std::vector<Node> kept;
  kept.reserve(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (!removed[n]) kept.push_back(std::move(graph.nodes[n]));
  }
  graph.nodes = std::move(kept);
}

}  // namespace loopserve::engine::openvino
