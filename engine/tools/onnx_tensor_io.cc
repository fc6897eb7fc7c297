#include "engine/tools/onnx_tensor_io.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/engine.h"
#include "engine/tensor/shape.h"

namespace loopserve::tools {
namespace {

using engine::DataType;
using engine::Tensor;
using engine::Value;
using engine::ValueKind;
using engine::ValueType;

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("error reading '", path, "'"));
  return buffer.str();
}

template <typename Proto>
absl::StatusOr<Proto> ParseFile(const std::string& path, absl::string_view proto_name) {
  LS_ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path));
  Proto proto;
  if (!proto.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a valid ", proto_name, " (", bytes.size(), " bytes)"));
  }
  return proto;
}

absl::Status WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::NotFoundError(absl::StrCat("cannot create '", path, "'"));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("error writing '", path, "'"));
  return absl::OkStatus();
}

// The onnx 1.12 test data store bfloat16 tensors as uint16 bit patterns: take them as declared.
void AdoptDeclaredBFloat16(Tensor& tensor, DataType declared) {
  if (declared == DataType::kBFloat16 && tensor.dtype() == DataType::kUint16) {
    Tensor relabelled = Tensor::View(DataType::kBFloat16, tensor.shape(), tensor.raw_data());
    Tensor owned;
    owned.CopyFrom(relabelled);
    tensor = std::move(owned);
  }
}

void AdoptDeclaredBFloat16(Value& value, DataType declared) {
  if (value.is_tensor()) {
    AdoptDeclaredBFloat16(value.mutable_tensor(), declared);
  } else if (value.is_sequence()) {
    for (Tensor& t : value.mutable_sequence()) AdoptDeclaredBFloat16(t, declared);
  }
}

}  // namespace

absl::StatusOr<DataType> DataTypeFromOnnx(int onnx_type, absl::string_view what) {
  absl::StatusOr<DataType> type = engine::DataTypeFromOnnx(onnx_type);
  if (!type.ok()) return Annotate(type.status(), absl::StrCat(what, ": "));
  return type;
}

int DataTypeToOnnx(DataType type) { return engine::DataTypeToOnnx(type); }

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto, absl::string_view what) {
  return engine::TensorFromOnnx(proto, what);
}

onnx::TensorProto TensorToProto(const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  engine::TensorToOnnx(tensor, &proto);
  proto.set_name(name);
  return proto;
}

absl::StatusOr<Value> ValueFromSequenceProto(const onnx::SequenceProto& proto,
                                             absl::string_view what) {
  if (proto.elem_type() != onnx::SequenceProto::TENSOR &&
      proto.elem_type() != onnx::SequenceProto::UNDEFINED) {
    return absl::UnimplementedError(absl::StrCat(
        what, ": only sequences of tensors are supported (elem_type ", proto.elem_type(), ")"));
  }
  if (proto.sparse_tensor_values_size() > 0 || proto.sequence_values_size() > 0 ||
      proto.map_values_size() > 0 || proto.optional_values_size() > 0) {
    return absl::UnimplementedError(
        absl::StrCat(what, ": only sequences of tensors are supported"));
  }
  Value value;
  std::vector<Tensor>& elements = value.mutable_sequence();
  elements.reserve(static_cast<size_t>(proto.tensor_values_size()));
  for (int i = 0; i < proto.tensor_values_size(); ++i) {
    LS_ASSIGN_OR_RETURN(
        Tensor t, TensorFromProto(proto.tensor_values(i), absl::StrCat(what, " element ", i)));
    if (!elements.empty() && t.dtype() != elements.front().dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": element ", i, " is ", engine::DataTypeName(t.dtype()),
                       ", element 0 is ", engine::DataTypeName(elements.front().dtype())));
    }
    elements.push_back(std::move(t));
  }
  return value;
}

absl::StatusOr<Value> ValueFromOptionalProto(const onnx::OptionalProto& proto,
                                             absl::string_view what) {
  switch (proto.elem_type()) {
    case onnx::OptionalProto::UNDEFINED:
      return Value();
    case onnx::OptionalProto::TENSOR: {
      if (!proto.has_tensor_value()) return Value();
      LS_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(proto.tensor_value(), what));
      return Value(std::move(t));
    }
    case onnx::OptionalProto::SEQUENCE:
      if (!proto.has_sequence_value()) return Value();
      return ValueFromSequenceProto(proto.sequence_value(), what);
    default:
      return absl::UnimplementedError(
          absl::StrCat(what, ": only optionals of tensors or sequences are supported (elem_type ",
                       proto.elem_type(), ")"));
  }
}

absl::StatusOr<onnx::SequenceProto> ValueToSequenceProto(const Value& value,
                                                         const std::string& name) {
  if (!value.is_sequence()) {
    return absl::InvalidArgumentError(absl::StrCat("value '", name, "' is ",
                                                   value.is_tensor() ? "a tensor" : "empty",
                                                   ", expected a sequence"));
  }
  onnx::SequenceProto proto;
  proto.set_name(name);
  proto.set_elem_type(onnx::SequenceProto::TENSOR);
  for (const Tensor& t : value.sequence()) *proto.add_tensor_values() = TensorToProto(t, "");
  return proto;
}

absl::StatusOr<onnx::OptionalProto> ValueToOptionalProto(const Value& value,
                                                         const std::string& name) {
  onnx::OptionalProto proto;
  proto.set_name(name);
  if (value.is_tensor()) {
    proto.set_elem_type(onnx::OptionalProto::TENSOR);
    *proto.mutable_tensor_value() = TensorToProto(value.tensor(), "");
  } else if (value.is_sequence()) {
    proto.set_elem_type(onnx::OptionalProto::SEQUENCE);
    LS_ASSIGN_OR_RETURN(*proto.mutable_sequence_value(), ValueToSequenceProto(value, ""));
  } else {
    proto.set_elem_type(onnx::OptionalProto::UNDEFINED);
  }
  return proto;
}

absl::StatusOr<Value> ReadValueFile(const std::string& path, const ValueType& declared,
                                    std::string* name) {
  const std::string what = absl::StrCat("'", path, "'");
  Value value;
  switch (declared.kind) {
    case ValueKind::kSequence: {
      LS_ASSIGN_OR_RETURN(onnx::SequenceProto proto,
                          ParseFile<onnx::SequenceProto>(path, "SequenceProto"));
      LS_ASSIGN_OR_RETURN(value, ValueFromSequenceProto(proto, what));
      if (name != nullptr) *name = proto.name();
      break;
    }
    case ValueKind::kOptional: {
      LS_ASSIGN_OR_RETURN(onnx::OptionalProto proto,
                          ParseFile<onnx::OptionalProto>(path, "OptionalProto"));
      LS_ASSIGN_OR_RETURN(value, ValueFromOptionalProto(proto, what));
      if (name != nullptr) *name = proto.name();
      break;
    }
    case ValueKind::kTensor:
    case ValueKind::kUnknown: {
      LS_ASSIGN_OR_RETURN(onnx::TensorProto proto,
                          ParseFile<onnx::TensorProto>(path, "TensorProto"));
      LS_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(proto, what));
      value = Value(std::move(t));
      if (name != nullptr) *name = proto.name();
      break;
    }
  }
  AdoptDeclaredBFloat16(value, declared.dtype);
  return value;
}

absl::Status WriteValueFile(const std::string& path, const std::string& name, const Value& value,
                            const ValueType& declared) {
  std::string bytes;
  ValueKind kind = declared.kind;
  if (kind == ValueKind::kUnknown) {
    kind = value.is_sequence() ? ValueKind::kSequence : ValueKind::kTensor;
  }
  switch (kind) {
    case ValueKind::kSequence: {
      LS_ASSIGN_OR_RETURN(onnx::SequenceProto proto, ValueToSequenceProto(value, name));
      bytes = proto.SerializeAsString();
      break;
    }
    case ValueKind::kOptional: {
      LS_ASSIGN_OR_RETURN(onnx::OptionalProto proto, ValueToOptionalProto(value, name));
      bytes = proto.SerializeAsString();
      break;
    }
    default:
      if (!value.is_tensor()) {
        return absl::InvalidArgumentError(absl::StrCat("output '", name, "' is ",
                                                       value.is_sequence() ? "a sequence" : "empty",
                                                       ", but the model declares a tensor"));
      }
      bytes = TensorToProto(value.tensor(), name).SerializeAsString();
      break;
  }
  return WriteFileBytes(path, bytes);
}

}  // namespace loopserve::tools
