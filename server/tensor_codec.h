#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/tensor/value.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/grpc_service.pb.h"

namespace loopserve::server {

// Translation between KServe v2 messages and engine values. Stateless functions; thread-safe.

// Parses the serialized ModelInferRequest in `bytes` (a gRPC message) into `request` and empties
// `bytes`. InvalidArgument for bytes that are not such a message (empty bytes are an empty one).
absl::Status ParseInferRequest(grpc::ByteBuffer& bytes, inference::ModelInferRequest* request);

// A ModelInferRequest decoded against a model's signature.
struct DecodedRequest {
  // One value per model input, in Model::inputs() order. Raw inputs whose bytes are suitably
  // aligned are zero-copy views of `request.raw_input_contents`, so the request must outlive every
  // use of these values; the others own copies. An omitted optional input is a kNone value.
  std::vector<engine::Value> inputs;
  // Model output indices to return, in response order (all outputs when none were requested).
  std::vector<int> outputs;
};

// Validates and decodes `request` for `model`. InvalidArgument, naming the tensor, for: an unknown
// or repeated input, a missing required input, an unknown datatype or one that differs from the
// declared type, negative or overflowing dims, raw byte counts or typed element counts that do not
// match the shape, typed contents in the wrong field, raw contents mixed with typed contents, a
// raw_input_contents count different from the input count, an unknown or repeated output name.
absl::StatusOr<DecodedRequest> DecodeInferRequest(const inference::ModelInferRequest& request,
                                                  const engine::Model& model);

// Appends the selected `outputs` (indices into Model::outputs(), `values` in Model::outputs()
// order) to `response` as tensors with datatype and shape plus one raw_output_contents entry each.
// Unimplemented for outputs that are sequences or empty optionals (not expressible in KServe v2).
absl::Status EncodeInferOutputs(const engine::Model& model, const std::vector<int>& outputs,
                                const std::vector<engine::Value>& values,
                                inference::ModelInferResponse* response);

}  // namespace loopserve::server
