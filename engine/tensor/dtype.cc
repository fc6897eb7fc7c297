#include "engine/tensor/dtype.h"

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
  }
  return "undefined";
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
