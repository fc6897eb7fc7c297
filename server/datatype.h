#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tensor/dtype.h"

namespace loopserve::server {

// KServe v2 datatype strings ("BOOL", "UINT8", ..., "FP16", "FP32", "FP64", "BF16", "BYTES")
// <-> engine element types (BYTES: kString). Case-sensitive, as the protocol specifies.
absl::StatusOr<engine::DataType> DataTypeFromKserve(absl::string_view datatype);

// The KServe string for an engine type; "" for kUndefined (an undeclared element type).
absl::string_view KserveDataType(engine::DataType dtype);

}  // namespace loopserve::server
