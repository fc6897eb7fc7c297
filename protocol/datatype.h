#pragma once

#include <cstdint>
#include <type_traits>

#include "absl/strings/string_view.h"

// The Open Inference Protocol's (KServe v2) tensor datatypes: one table under both the client and
// the server, so that neither spells the list out again.
namespace loopserve::protocol {

enum class Datatype : uint8_t {
  kInvalid = 0,
  kBool,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp16,
  kFp32,
  kFp64,
  kBf16,
  kBytes,
};

// "FP32" -> kFp32; kInvalid for anything else (case-sensitive, as the protocol specifies).
Datatype ParseDatatype(absl::string_view name);

// kFp32 -> "FP32"; "" for kInvalid.
absl::string_view DatatypeName(Datatype datatype);

// Bytes per element in the protocol's raw (little-endian) layout: 1 for BOOL, 2 for FP16/BF16,
// ...; 0 for BYTES (length-prefixed, see bytes.h) and kInvalid.
int ElementSize(Datatype datatype);

// Which typed field of InferTensorContents carries a datatype's values (the protocol's rule:
// INT8/INT16/INT32 in int_contents, UINT8/UINT16/UINT32 in uint_contents, ...); kNone for the
// types the protocol gives no typed field (FP16, BF16) and kInvalid.
enum class ContentsField { kNone, kBool, kInt, kInt64, kUint, kUint64, kFp32, kFp64, kBytes };
ContentsField ContentsFieldOf(Datatype datatype);

// The datatype of C++ element type T (bool, the integer types, float, double).
template <typename T>
constexpr Datatype DatatypeOf() {
  if constexpr (std::is_same_v<T, bool>) return Datatype::kBool;
  if constexpr (std::is_same_v<T, uint8_t>) return Datatype::kUint8;
  if constexpr (std::is_same_v<T, uint16_t>) return Datatype::kUint16;
  if constexpr (std::is_same_v<T, uint32_t>) return Datatype::kUint32;
  if constexpr (std::is_same_v<T, uint64_t>) return Datatype::kUint64;
  if constexpr (std::is_same_v<T, int8_t>) return Datatype::kInt8;
  if constexpr (std::is_same_v<T, int16_t>) return Datatype::kInt16;
  if constexpr (std::is_same_v<T, int32_t>) return Datatype::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return Datatype::kInt64;
  if constexpr (std::is_same_v<T, float>) return Datatype::kFp32;
  if constexpr (std::is_same_v<T, double>) return Datatype::kFp64;
  return Datatype::kInvalid;
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls `f(Tag<T>{})` with T the C++ element type of a datatype whose elements are numbers or
// booleans (bool, the integer types, float, double) and returns true; returns false without
// calling `f` for FP16, BF16, BYTES and kInvalid (no C++ arithmetic type holds them).
template <typename F>
bool VisitNumeric(Datatype datatype, F&& f) {
  switch (datatype) {
    case Datatype::kBool:
      f(Tag<bool>{});
      return true;
    case Datatype::kUint8:
      f(Tag<uint8_t>{});
      return true;
    case Datatype::kUint16:
      f(Tag<uint16_t>{});
      return true;
    case Datatype::kUint32:
      f(Tag<uint32_t>{});
      return true;
    case Datatype::kUint64:
      f(Tag<uint64_t>{});
      return true;
    case Datatype::kInt8:
      f(Tag<int8_t>{});
      return true;
    case Datatype::kInt16:
      f(Tag<int16_t>{});
      return true;
    case Datatype::kInt32:
      f(Tag<int32_t>{});
      return true;
    case Datatype::kInt64:
      f(Tag<int64_t>{});
      return true;
    case Datatype::kFp32:
      f(Tag<float>{});
      return true;
    case Datatype::kFp64:
      f(Tag<double>{});
      return true;
    default:
      return false;
  }
}

}  // namespace loopserve::protocol
