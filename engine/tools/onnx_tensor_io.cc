#include "engine/tools/onnx_tensor_io.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tensor/shape.h"

namespace loopserve::tools {
namespace {

using engine::DataType;
using engine::Tensor;
using engine::Value;
using engine::ValueKind;
using engine::ValueType;

// raw_data is little-endian; copying it straight into tensors is only right on a little-endian
// host, which is all loopserve builds for.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "onnx_tensor_io assumes little-endian");

// Copies a typed repeated field into the tensor, converting each element with `convert`.
template <typename Dst, typename Field, typename Convert>
absl::Status CopyTyped(const Field& field, absl::string_view field_name, Tensor& tensor,
                       absl::string_view what, Convert convert) {
  const int64_t n = tensor.NumElements();
  if (static_cast<int64_t>(field.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", field_name, " has ", field.size(),
                                                   " elements, the shape ",
                                                   tensor.shape().ToString(), " needs ", n));
  }
  Dst* out = tensor.mutable_data<Dst>();
  for (int64_t i = 0; i < n; ++i) out[i] = convert(field.Get(static_cast<int>(i)));
  return absl::OkStatus();
}

template <typename T>
T Identity(T v) {
  return v;
}

// Reads the typed field that the ONNX spec assigns to the tensor's element type.
absl::Status CopyTypedField(const onnx::TensorProto& proto, Tensor& tensor,
                            absl::string_view what) {
  switch (tensor.dtype()) {
    case DataType::kFloat32:
      return CopyTyped<float>(proto.float_data(), "float_data", tensor, what, Identity<float>);
    case DataType::kFloat64:
      return CopyTyped<double>(proto.double_data(), "double_data", tensor, what, Identity<double>);
    case DataType::kInt64:
      return CopyTyped<int64_t>(proto.int64_data(), "int64_data", tensor, what, Identity<int64_t>);
    case DataType::kInt32:
      return CopyTyped<int32_t>(proto.int32_data(), "int32_data", tensor, what, Identity<int32_t>);
    case DataType::kInt8:
      return CopyTyped<int8_t>(proto.int32_data(), "int32_data", tensor, what,
                               [](int32_t v) { return static_cast<int8_t>(v); });
    case DataType::kInt16:
      return CopyTyped<int16_t>(proto.int32_data(), "int32_data", tensor, what,
                                [](int32_t v) { return static_cast<int16_t>(v); });
    case DataType::kUint8:
      return CopyTyped<uint8_t>(proto.int32_data(), "int32_data", tensor, what,
                                [](int32_t v) { return static_cast<uint8_t>(v); });
    case DataType::kUint16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      // 16-bit floats travel as their bit patterns in the low half of an int32.
      return CopyTyped<uint16_t>(proto.int32_data(), "int32_data", tensor, what,
                                 [](int32_t v) { return static_cast<uint16_t>(v); });
    case DataType::kBool:
      return CopyTyped<bool>(proto.int32_data(), "int32_data", tensor, what,
                             [](int32_t v) { return v != 0; });
    case DataType::kUint32:
      return CopyTyped<uint32_t>(proto.uint64_data(), "uint64_data", tensor, what,
                                 [](uint64_t v) { return static_cast<uint32_t>(v); });
    case DataType::kUint64:
      return CopyTyped<uint64_t>(proto.uint64_data(), "uint64_data", tensor, what,
                                 Identity<uint64_t>);
    case DataType::kUndefined:
      break;
  }
  return absl::InternalError(absl::StrCat(what, ": undefined element type"));
}

bool HasTypedData(const onnx::TensorProto& proto) {
  return proto.float_data_size() > 0 || proto.int32_data_size() > 0 ||
         proto.int64_data_size() > 0 || proto.double_data_size() > 0 ||
         proto.uint64_data_size() > 0 || proto.string_data_size() > 0;
}

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
  switch (onnx_type) {
    case onnx::TensorProto::FLOAT:
      return DataType::kFloat32;
    case onnx::TensorProto::DOUBLE:
      return DataType::kFloat64;
    case onnx::TensorProto::FLOAT16:
      return DataType::kFloat16;
    case onnx::TensorProto::BFLOAT16:
      return DataType::kBFloat16;
    case onnx::TensorProto::INT8:
      return DataType::kInt8;
    case onnx::TensorProto::UINT8:
      return DataType::kUint8;
    case onnx::TensorProto::INT16:
      return DataType::kInt16;
    case onnx::TensorProto::UINT16:
      return DataType::kUint16;
    case onnx::TensorProto::INT32:
      return DataType::kInt32;
    case onnx::TensorProto::UINT32:
      return DataType::kUint32;
    case onnx::TensorProto::INT64:
      return DataType::kInt64;
    case onnx::TensorProto::UINT64:
      return DataType::kUint64;
    case onnx::TensorProto::BOOL:
      return DataType::kBool;
    case onnx::TensorProto::STRING:
      return absl::UnimplementedError(
          absl::StrCat(what, ": string tensors are not supported by the engine"));
    default:
      break;
  }
  const std::string type_name = onnx::TensorProto::DataType_IsValid(onnx_type)
                                    ? onnx::TensorProto::DataType_Name(onnx_type)
                                    : absl::StrCat("unknown data type ", onnx_type);
  return absl::UnimplementedError(
      absl::StrCat(what, ": element type ", type_name, " is not supported by the engine"));
}

int DataTypeToOnnx(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return onnx::TensorProto::FLOAT;
    case DataType::kFloat64:
      return onnx::TensorProto::DOUBLE;
    case DataType::kFloat16:
      return onnx::TensorProto::FLOAT16;
    case DataType::kBFloat16:
      return onnx::TensorProto::BFLOAT16;
    case DataType::kInt8:
      return onnx::TensorProto::INT8;
    case DataType::kUint8:
      return onnx::TensorProto::UINT8;
    case DataType::kInt16:
      return onnx::TensorProto::INT16;
    case DataType::kUint16:
      return onnx::TensorProto::UINT16;
    case DataType::kInt32:
      return onnx::TensorProto::INT32;
    case DataType::kUint32:
      return onnx::TensorProto::UINT32;
    case DataType::kInt64:
      return onnx::TensorProto::INT64;
    case DataType::kUint64:
      return onnx::TensorProto::UINT64;
    case DataType::kBool:
      return onnx::TensorProto::BOOL;
    case DataType::kUndefined:
      break;
  }
  return onnx::TensorProto::UNDEFINED;
}

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto, absl::string_view what) {
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    return absl::UnimplementedError(absl::StrCat(what, ": external tensor data is not supported"));
  }
  if (proto.has_segment()) {
    return absl::UnimplementedError(absl::StrCat(what, ": segmented tensors are not supported"));
  }
  LS_ASSIGN_OR_RETURN(DataType dtype, DataTypeFromOnnx(proto.data_type(), what));
  LS_ASSIGN_OR_RETURN(
      engine::Shape shape,
      engine::ValidateDims(absl::MakeConstSpan(proto.dims().data(), proto.dims().size()), what));
  Tensor tensor(dtype, shape);
  if (proto.has_raw_data()) {
    if (HasTypedData(proto)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": has both raw_data and a typed data field"));
    }
    const std::string& raw = proto.raw_data();
    if (raw.size() != tensor.ByteSize()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": raw_data has ", raw.size(), " bytes, ", engine::DataTypeName(dtype),
                       " shape ", shape.ToString(), " needs ", tensor.ByteSize()));
    }
    if (!raw.empty()) std::memcpy(tensor.mutable_raw_data(), raw.data(), raw.size());
    if (dtype == DataType::kBool) {
      // Normalise to 0/1 so comparisons and kernels can rely on it.
      bool* b = tensor.mutable_data<bool>();
      const uint8_t* bytes = reinterpret_cast<const uint8_t*>(raw.data());
      for (size_t i = 0; i < raw.size(); ++i) b[i] = bytes[i] != 0;
    }
    return tensor;
  }
  LS_RETURN_IF_ERROR(CopyTypedField(proto, tensor, what));
  return tensor;
}

onnx::TensorProto TensorToProto(const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(DataTypeToOnnx(tensor.dtype()));
  for (int64_t d : tensor.shape().dims()) proto.add_dims(d);
  const size_t bytes = tensor.ByteSize();
  proto.set_raw_data(bytes == 0 ? std::string()
                                : std::string(static_cast<const char*>(tensor.raw_data()), bytes));
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
