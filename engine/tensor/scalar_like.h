#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "engine/tensor/shape.h"

namespace loopserve::engine {

// ONNX Runtime's leniency for scalar-like inputs, which real clients rely on (Silero VAD's npm
// packages send the scalar `sr` as [1]): true when `fed` is [1] and `declared` is a scalar, or
// `fed` is a scalar and `declared` is [1]. The caller then reads the tensor as the declared shape
// (one element either way); every other mismatch stays an error. Used by Model::Run against the
// model's declarations and by the server against a model config's dims.
inline bool IsScalarLikeMatch(const Shape& fed, absl::Span<const int64_t> declared) {
  const bool fed_vector_of_one = fed.rank() == 1 && fed[0] == 1;
  const bool declared_vector_of_one = declared.size() == 1 && declared[0] == 1;
  return (fed_vector_of_one && declared.empty()) || (fed.rank() == 0 && declared_vector_of_one);
}

}  // namespace loopserve::engine
