#pragma once

// Reading ONNX TensorProto files (the ONNX backend-test `input_<k>.pb` / `output_<k>.pb` layout)
// into client tensors. Lives in its own library, loopserve_client_onnx, so that loopserve_client
// itself depends on nothing but the OIP protos.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/tensor.h"
#include "onnx/onnx_pb.h"

namespace loopserve::client {

// The OIP datatype for an ONNX TensorProto::DataType; InvalidArgument for types OIP lacks
// (STRING, COMPLEX*, UNDEFINED).
absl::StatusOr<std::string> OipDataTypeFromOnnx(int onnx_data_type);

// Converts a TensorProto (raw_data or the typed *_data fields) to a Tensor named after its
// `name`. InvalidArgument for external data, unsupported types or inconsistent sizes.
absl::StatusOr<Tensor> TensorFromOnnx(const onnx::TensorProto& proto);

// Reads one serialized TensorProto. NotFound when the file is missing.
absl::StatusOr<Tensor> ReadOnnxTensorFile(const std::string& path);

// Reads `dir`/`prefix`_0.pb, `prefix`_1.pb, ... until the first missing index (prefix is "input"
// or "output"). NotFound when there is not even `prefix`_0.pb.
absl::StatusOr<std::vector<Tensor>> ReadOnnxTensorDir(const std::string& dir,
                                                      absl::string_view prefix);

}  // namespace loopserve::client
