#include "engine/tensor/dtype.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loopserve::engine {

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat64:
    case DataType::kInt64:
    case DataType::kUint64:
      return 8;
    case DataType::kFloat32:
    case DataType::kInt32:
    case DataType::kUint32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kInt16:
    case DataType::kUint16:
      return 2;
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kBool:
      return 1;
    case DataType::kString:
      return sizeof(std::string);
    case DataType::kUndefined:
      return 0;
  }
  return 0;
}

absl::string_view DataTypeName(DataType type) {
  switch (type) {
    case DataType::kUndefined:
      return "undefined";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt8:
      return "int8";
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt16:
      return "int16";
    case DataType::kUint16:
      return "uint16";
    case DataType::kInt32:
      return "int32";
    case DataType::kUint32:
      return "uint32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUint64:
      return "uint64";
    case DataType::kBool:
      return "bool";
    case DataType::kString:
      return "string";
  }
  return "undefined";
}

namespace {

// ONNX TensorProto.DataType, indexed by code.
constexpr struct {
  const char* name;
  DataType type;
} kOnnxTypes[] = {
    {"UNDEFINED", DataType::kUndefined}, {"FLOAT", DataType::kFloat32},
    {"UINT8", DataType::kUint8},         {"INT8", DataType::kInt8},
    {"UINT16", DataType::kUint16},       {"INT16", DataType::kInt16},
    {"INT32", DataType::kInt32},         {"INT64", DataType::kInt64},
    {"STRING", DataType::kString},       {"BOOL", DataType::kBool},
    {"FLOAT16", DataType::kFloat16},     {"DOUBLE", DataType::kFloat64},
    {"UINT32", DataType::kUint32},       {"UINT64", DataType::kUint64},
    {"COMPLEX64", DataType::kUndefined}, {"COMPLEX128", DataType::kUndefined},
    {"BFLOAT16", DataType::kBFloat16},
};
constexpr int64_t kNumOnnxTypes = sizeof(kOnnxTypes) / sizeof(kOnnxTypes[0]);

}  // namespace

absl::StatusOr<DataType> DataTypeFromOnnx(int64_t onnx_type) {
  if (onnx_type > 0 && onnx_type < kNumOnnxTypes &&
      kOnnxTypes[onnx_type].type != DataType::kUndefined) {
    return kOnnxTypes[onnx_type].type;
  }
  const std::string name = onnx_type >= 0 && onnx_type < kNumOnnxTypes ? kOnnxTypes[onnx_type].name
                                                                       : absl::StrCat(onnx_type);
  return absl::UnimplementedError(absl::StrCat("element type ", name, " is not supported"));
}

absl::StatusOr<DataType> DataTypeFromOnnxName(absl::string_view name) {
  for (int64_t code = 1; code < kNumOnnxTypes; ++code) {
    if (name == kOnnxTypes[code].name) return DataTypeFromOnnx(code);
  }
  return absl::UnimplementedError(absl::StrCat("element type '", name, "' is not supported"));
}

int DataTypeToOnnx(DataType type) {
  if (type == DataType::kUndefined) return 0;
  for (int64_t code = 1; code < kNumOnnxTypes; ++code) {
    if (kOnnxTypes[code].type == type) return static_cast<int>(code);
  }
  return 0;
}

bool IsFloatingPoint(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64;
}

bool IsInteger(DataType type) {
  switch (type) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kInt16:
    case DataType::kUint16:
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kInt64:
    case DataType::kUint64:
      return true;
    default:
      return false;
  }
}

}  // namespace loopserve::engine
