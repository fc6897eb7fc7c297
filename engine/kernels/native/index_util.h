#pragma once

// Reading int32/int64 index tensors for the gather/scatter kernels.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine::native {

// Element i of an int32 or int64 tensor (the caller checked the type with CheckIndexType).
inline int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kInt64 ? t.data<int64_t>()[i]
                                       : static_cast<int64_t>(t.data<int32_t>()[i]);
}

inline absl::Status CheckIndexType(const Tensor& t, absl::string_view what) {
  if (t.dtype() == DataType::kInt64 || t.dtype() == DataType::kInt32) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " must be int32 or int64, got ", DataTypeName(t.dtype())));
}

// Normalises index `k` (negative counts from the end) against `size`; InvalidArgument when out of
// range.
inline absl::StatusOr<int64_t> NormalizeIndex(int64_t k, int64_t size, absl::string_view what) {
  if (k < -size || k >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", k, " is out of range for a dimension of size ", size));
  }
  return k < 0 ? k + size : k;
}

}  // namespace loopserve::engine::native
