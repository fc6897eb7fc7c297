#include "server/datatype.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "protocol/datatype.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

using engine::DataType;

// The protocol's datatypes (protocol/datatype.h) as engine element types (BYTES: kString).
constexpr std::pair<protocol::Datatype, DataType> kTypes[] = {
    {protocol::Datatype::kBool, DataType::kBool},
    {protocol::Datatype::kUint8, DataType::kUint8},
    {protocol::Datatype::kUint16, DataType::kUint16},
    {protocol::Datatype::kUint32, DataType::kUint32},
    {protocol::Datatype::kUint64, DataType::kUint64},
    {protocol::Datatype::kInt8, DataType::kInt8},
    {protocol::Datatype::kInt16, DataType::kInt16},
    {protocol::Datatype::kInt32, DataType::kInt32},
    {protocol::Datatype::kInt64, DataType::kInt64},
    {protocol::Datatype::kFp16, DataType::kFloat16},
    {protocol::Datatype::kFp32, DataType::kFloat32},
    {protocol::Datatype::kFp64, DataType::kFloat64},
    {protocol::Datatype::kBf16, DataType::kBFloat16},
    {protocol::Datatype::kBytes, DataType::kString},
};

}  // namespace

absl::StatusOr<DataType> DataTypeFromKserve(absl::string_view datatype) {
  const protocol::Datatype parsed = protocol::ParseDatatype(datatype);
  for (const auto& [wire, type] : kTypes) {
    if (wire == parsed) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown datatype ", QuoteUntrusted(datatype)));
}

absl::string_view KserveDataType(DataType dtype) {
  for (const auto& [wire, type] : kTypes) {
    if (type == dtype) return protocol::DatatypeName(wire);
  }
  return "";
}

}  // namespace loopserve::server
