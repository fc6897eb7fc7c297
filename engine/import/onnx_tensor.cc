#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/engine.h"
#include "onnx/onnx_pb.h"

namespace loopserve::engine {

namespace {

// raw_data is little-endian; copying it straight into tensors is only right on a little-endian
// host, which is all loopserve builds for.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "onnx_tensor assumes little-endian");

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
    case DataType::kString:
      return CopyTyped<std::string>(proto.string_data(), "string_data", tensor, what,
                                    [](const std::string& v) { return v; });
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

// Elements in all typed data fields together (only the one of the tensor's type may be set;
// CopyTypedField checks which).
uint64_t TypedElementCount(const onnx::TensorProto& proto) {
  return static_cast<uint64_t>(proto.float_data_size()) + proto.int32_data_size() +
         proto.int64_data_size() + proto.double_data_size() + proto.uint64_data_size() +
         proto.string_data_size();
}

}  // namespace

absl::StatusOr<Tensor> TensorFromOnnx(const onnx::TensorProto& proto, absl::string_view what) {
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    return absl::UnimplementedError(absl::StrCat(what, ": external tensor data is not supported"));
  }
  if (proto.has_segment()) {
    return absl::UnimplementedError(absl::StrCat(what, ": segmented tensors are not supported"));
  }
  absl::StatusOr<DataType> onnx_dtype = DataTypeFromOnnx(proto.data_type());
  if (!onnx_dtype.ok()) return Annotate(onnx_dtype.status(), absl::StrCat(what, ": "));
  const DataType dtype = *onnx_dtype;
  LS_ASSIGN_OR_RETURN(
      Shape shape,
      ValidateDims(absl::MakeConstSpan(proto.dims().data(), proto.dims().size()), what));
  if (proto.has_raw_data() && dtype == DataType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a string tensor keeps its elements in string_data, not raw_data"));
  }
  // The sizes the dims claim are checked against the data present before anything is allocated
  // (ValidateDims bounds the element count by 2^40, so the product cannot overflow).
  const uint64_t elements = static_cast<uint64_t>(shape.NumElements());
  const uint64_t bytes = elements * DataTypeSize(dtype);
  if (proto.has_raw_data()) {
    if (HasTypedData(proto)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": has both raw_data and a typed data field"));
    }
    const std::string& raw = proto.raw_data();
    if (raw.size() != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": raw_data has ", raw.size(),
                                                     " bytes, ", DataTypeName(dtype), " shape ",
                                                     shape.ToString(), " needs ", bytes));
    }
    Tensor tensor(dtype, shape);
    if (!raw.empty()) std::memcpy(tensor.mutable_raw_data(), raw.data(), raw.size());
    if (dtype == DataType::kBool) {
      // Normalise to 0/1 so comparisons and kernels can rely on it.
      bool* b = tensor.mutable_data<bool>();
      const uint8_t* bytes = reinterpret_cast<const uint8_t*>(raw.data());
      for (size_t i = 0; i < raw.size(); ++i) b[i] = bytes[i] != 0;
    }
    return tensor;
  }
  const uint64_t typed = TypedElementCount(proto);
  if (typed != elements) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the data fields hold ", typed,
                                                   " elements, ", DataTypeName(dtype), " shape ",
                                                   shape.ToString(), " needs ", elements));
  }
  Tensor tensor(dtype, shape);
  LS_RETURN_IF_ERROR(CopyTypedField(proto, tensor, what));
  return tensor;
}

void TensorToOnnx(const Tensor& tensor, onnx::TensorProto* proto) {
  proto->set_data_type(DataTypeToOnnx(tensor.dtype()));
  proto->clear_dims();
  for (int64_t d : tensor.shape().dims()) proto->add_dims(d);
  if (tensor.dtype() == DataType::kString) {
    proto->clear_string_data();
    for (const std::string& s : tensor.span<std::string>()) proto->add_string_data(s);
    return;
  }
  proto->set_raw_data(tensor.raw_data(), tensor.ByteSize());
}

}  // namespace loopserve::engine
