#include "engine/import/onnx_tensor.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "onnx/onnx_pb.h"

namespace loopserve::engine {

absl::StatusOr<DataType> DataTypeFromOnnx(int onnx_type) {
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
    default:
      break;
  }
  const std::string name = onnx::TensorProto::DataType_IsValid(onnx_type)
                               ? onnx::TensorProto::DataType_Name(onnx_type)
                               : absl::StrCat(onnx_type);
  return absl::UnimplementedError(absl::StrCat("element type ", name, " is not supported"));
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

namespace {

// Copies a repeated typed field into the tensor, converting each element to T.
template <typename T, typename Field>
absl::Status FillFrom(const Field& field, Tensor& tensor, absl::string_view what,
                      absl::string_view field_name) {
  const int64_t n = tensor.NumElements();
  if (field.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", field_name, " has ", field.size(),
                                                   " values, shape ", tensor.shape().ToString(),
                                                   " needs ", n));
  }
  T* out = tensor.mutable_data<T>();
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(field.Get(static_cast<int>(i)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> TensorFromOnnx(const onnx::TensorProto& proto, absl::string_view what) {
  if (proto.data_location() == onnx::TensorProto::EXTERNAL || proto.external_data_size() > 0) {
    return absl::UnimplementedError(absl::StrCat(what, ": external tensor data is not supported"));
  }
  if (proto.has_segment()) {
    return absl::UnimplementedError(absl::StrCat(what, ": segmented tensors are not supported"));
  }
  absl::StatusOr<DataType> dtype = DataTypeFromOnnx(proto.data_type());
  if (!dtype.ok()) return Annotate(dtype.status(), absl::StrCat(what, ": "));
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  LS_ASSIGN_OR_RETURN(Shape shape, ValidateDims(dims, what));
  Tensor tensor(*dtype, shape);
  const size_t bytes = tensor.ByteSize();
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": raw_data has ", proto.raw_data().size(), " bytes, shape ",
                       shape.ToString(), " of ", DataTypeName(*dtype), " needs ", bytes));
    }
    if (bytes > 0) std::memcpy(tensor.mutable_raw_data(), proto.raw_data().data(), bytes);
    return tensor;
  }
  switch (*dtype) {
    case DataType::kFloat32:
      LS_RETURN_IF_ERROR(FillFrom<float>(proto.float_data(), tensor, what, "float_data"));
      break;
    case DataType::kFloat64:
      LS_RETURN_IF_ERROR(FillFrom<double>(proto.double_data(), tensor, what, "double_data"));
      break;
    case DataType::kInt64:
      LS_RETURN_IF_ERROR(FillFrom<int64_t>(proto.int64_data(), tensor, what, "int64_data"));
      break;
    case DataType::kUint64:
      LS_RETURN_IF_ERROR(FillFrom<uint64_t>(proto.uint64_data(), tensor, what, "uint64_data"));
      break;
    case DataType::kUint32:
      LS_RETURN_IF_ERROR(FillFrom<uint32_t>(proto.uint64_data(), tensor, what, "uint64_data"));
      break;
    case DataType::kInt32:
      LS_RETURN_IF_ERROR(FillFrom<int32_t>(proto.int32_data(), tensor, what, "int32_data"));
      break;
    case DataType::kInt16:
      LS_RETURN_IF_ERROR(FillFrom<int16_t>(proto.int32_data(), tensor, what, "int32_data"));
      break;
    case DataType::kUint16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      LS_RETURN_IF_ERROR(FillFrom<uint16_t>(proto.int32_data(), tensor, what, "int32_data"));
      break;
    case DataType::kInt8:
      LS_RETURN_IF_ERROR(FillFrom<int8_t>(proto.int32_data(), tensor, what, "int32_data"));
      break;
    case DataType::kUint8:
      LS_RETURN_IF_ERROR(FillFrom<uint8_t>(proto.int32_data(), tensor, what, "int32_data"));
      break;
    case DataType::kBool:
      LS_RETURN_IF_ERROR(FillFrom<bool>(proto.int32_data(), tensor, what, "int32_data"));
      break;
    case DataType::kUndefined:
      return absl::InvalidArgumentError(absl::StrCat(what, ": undefined element type"));
  }
  return tensor;
}

void TensorToOnnx(const Tensor& tensor, onnx::TensorProto* proto) {
  proto->set_data_type(DataTypeToOnnx(tensor.dtype()));
  proto->clear_dims();
  for (int64_t d : tensor.shape().dims()) proto->add_dims(d);
  proto->set_raw_data(tensor.raw_data(), tensor.ByteSize());
}

}  // namespace loopserve::engine
