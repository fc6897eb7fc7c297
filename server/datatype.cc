#include "server/datatype.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

using engine::DataType;

constexpr std::pair<absl::string_view, DataType> kTypes[] = {
    {"BOOL", DataType::kBool},     {"UINT8", DataType::kUint8},   {"UINT16", DataType::kUint16},
    {"UINT32", DataType::kUint32}, {"UINT64", DataType::kUint64}, {"INT8", DataType::kInt8},
    {"INT16", DataType::kInt16},   {"INT32", DataType::kInt32},   {"INT64", DataType::kInt64},
    {"FP16", DataType::kFloat16},  {"FP32", DataType::kFloat32},  {"FP64", DataType::kFloat64},
    {"BF16", DataType::kBFloat16}, {"BYTES", DataType::kString},
};

}  // namespace

absl::StatusOr<DataType> DataTypeFromKserve(absl::string_view datatype) {
  for (const auto& [name, type] : kTypes) {
    if (name == datatype) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown datatype ", QuoteUntrusted(datatype)));
}

absl::string_view KserveDataType(DataType dtype) {
  for (const auto& [name, type] : kTypes) {
    if (type == dtype) return name;
  }
  return "";
}

}  // namespace loopserve::server
