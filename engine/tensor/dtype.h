#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loopserve::engine {

// Element types the engine stores. Every type here can be held, copied, fed and returned; which
// ones an op computes on is up to its kernel. kFloat16 and kBFloat16 are stored as raw 16-bit
// patterns (uint16_t). kString elements are std::string objects that the tensor constructs,
// copies and destroys (tensor.h); only kernels that declare it receive them
// (Kernel::AcceptsStringInputs), so code that moves elements as bytes never sees one.
enum class DataType : uint8_t {
  kUndefined = 0,
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUint8,
  kInt16,
  kUint16,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kBool,
  kString,
};

// Size of one element in bytes (0 for kUndefined; sizeof(std::string) for kString).
size_t DataTypeSize(DataType type);

// Lower-case name used in messages: "float32", "int64", "bool", "string", ...
absl::string_view DataTypeName(DataType type);

// ONNX TensorProto.DataType codes (numbers fixed by the ONNX spec). Importers read them from
// tensors and value types, kernels from attributes such as Cast's `to`. Unimplemented, naming the
// type, for codes the engine does not hold (COMPLEX64, ...).
absl::StatusOr<DataType> DataTypeFromOnnx(int64_t onnx_type);
int DataTypeToOnnx(DataType type);  // 0 (UNDEFINED) for kUndefined
// The same by the code's name ("FLOAT", "INT64", ...), as opset-1 Cast writes it.
absl::StatusOr<DataType> DataTypeFromOnnxName(absl::string_view name);

bool IsFloatingPoint(DataType type);  // kFloat32, kFloat64 (not the 16-bit storage types)
bool IsInteger(DataType type);        // signed or unsigned integers (not bool)

// Maps a C++ element type to its DataType.
template <typename T>
struct DataTypeOf;
template <>
struct DataTypeOf<float> {
  static constexpr DataType value = DataType::kFloat32;
};
template <>
struct DataTypeOf<double> {
  static constexpr DataType value = DataType::kFloat64;
};
template <>
struct DataTypeOf<int8_t> {
  static constexpr DataType value = DataType::kInt8;
};
template <>
struct DataTypeOf<uint8_t> {
  static constexpr DataType value = DataType::kUint8;
};
template <>
struct DataTypeOf<int16_t> {
  static constexpr DataType value = DataType::kInt16;
};
template <>
struct DataTypeOf<uint16_t> {
  static constexpr DataType value = DataType::kUint16;
};
template <>
struct DataTypeOf<int32_t> {
  static constexpr DataType value = DataType::kInt32;
};
template <>
struct DataTypeOf<uint32_t> {
  static constexpr DataType value = DataType::kUint32;
};
template <>
struct DataTypeOf<int64_t> {
  static constexpr DataType value = DataType::kInt64;
};
template <>
struct DataTypeOf<uint64_t> {
  static constexpr DataType value = DataType::kUint64;
};
template <>
struct DataTypeOf<bool> {
  static constexpr DataType value = DataType::kBool;
};
template <>
struct DataTypeOf<std::string> {
  static constexpr DataType value = DataType::kString;
};

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls `fn(TypeTag<T>{})` with the C++ type of `type` for the numeric types a kernel computes on
// (float, double, all 8/16/32/64-bit integers) and returns true; returns false for anything else
// (bool, 16-bit floats, undefined) so the caller can report an unsupported type.
template <typename Fn>
bool DispatchNumeric(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kFloat32:
      fn(TypeTag<float>{});
      return true;
    case DataType::kFloat64:
      fn(TypeTag<double>{});
      return true;
    case DataType::kInt8:
      fn(TypeTag<int8_t>{});
      return true;
    case DataType::kUint8:
      fn(TypeTag<uint8_t>{});
      return true;
    case DataType::kInt16:
      fn(TypeTag<int16_t>{});
      return true;
    case DataType::kUint16:
      fn(TypeTag<uint16_t>{});
      return true;
    case DataType::kInt32:
      fn(TypeTag<int32_t>{});
      return true;
    case DataType::kUint32:
      fn(TypeTag<uint32_t>{});
      return true;
    case DataType::kInt64:
      fn(TypeTag<int64_t>{});
      return true;
    case DataType::kUint64:
      fn(TypeTag<uint64_t>{});
      return true;
    default:
      return false;
  }
}

// As DispatchNumeric, plus bool.
template <typename Fn>
bool DispatchNumericOrBool(DataType type, Fn&& fn) {
  if (type == DataType::kBool) {
    fn(TypeTag<bool>{});
    return true;
  }
  return DispatchNumeric(type, std::forward<Fn>(fn));
}

// Calls `fn(TypeTag<T>{})` with an unsigned integer type of the element's byte size, for kernels
// that only move elements (Gather, Slice, Concat, ...). Returns false for kUndefined and kString
// (whose elements are objects, not bytes).
template <typename Fn>
bool DispatchBySize(DataType type, Fn&& fn) {
  if (type == DataType::kString) return false;
  switch (DataTypeSize(type)) {
    case 1:
      fn(TypeTag<uint8_t>{});
      return true;
    case 2:
      fn(TypeTag<uint16_t>{});
      return true;
    case 4:
      fn(TypeTag<uint32_t>{});
      return true;
    case 8:
      fn(TypeTag<uint64_t>{});
      return true;
    default:
      return false;
  }
}

}  // namespace loopserve::engine
