#pragma once

#include "absl/status/statusor.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/tensor.h"

namespace onnx {
class TensorProto;
}

namespace loopserve::engine {

// Decodes a TensorProto (raw_data or the typed fields; little-endian) into an owned tensor,
// validating dims and byte counts. `what` names the tensor in messages. External data is
// Unimplemented.
absl::StatusOr<Tensor> TensorFromOnnx(const onnx::TensorProto& proto, absl::string_view what);

// Encodes `tensor` as a TensorProto with raw_data (string_data for strings).
void TensorToOnnx(const Tensor& tensor, onnx::TensorProto* proto);

}  // namespace loopserve::engine
