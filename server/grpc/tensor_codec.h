#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/tensor/value.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/grpc_service.pb.h"
#include "server/runner/infer_request.h"
#include "server/shm/shared_memory.h"

namespace loopserve::server {

// Translation between the KServe v2 gRPC messages and the protocol-free request (infer_request.h)
// and engine values. Stateless functions; thread-safe.

// Parses the serialized ModelInferRequest in `bytes` (a gRPC message of the RPC `rpc`:
// "ModelInfer" or "ModelStreamInfer") into `request` and empties `bytes`. InvalidArgument, naming
// `rpc`, for bytes that are not such a message (empty bytes are an empty one).
absl::Status ParseInferRequest(grpc::ByteBuffer& bytes, absl::string_view rpc,
                               inference::ModelInferRequest* request);

// Fills `out` from `request`: raw inputs view `request.raw_input_contents`, typed inputs decode
// from `request`'s typed contents fields, so `request` must outlive `out` and every tensor bound
// from it. InvalidArgument for a raw_input_contents count different from the input count, typed
// contents mixed with raw_input_contents, a `timeout` parameter that is not a non-negative
// int64 (or uint64), and a `stream_iterations` parameter that is not a bool; the model name,
// version and id are filled in first even then.
//
// With `shm` (Triton's system shared memory), inputs and outputs with the parameters
// shared_memory_region / _offset / _byte_size are bound to those regions: the input's raw bytes
// view the region, pinned in `bindings` (which must outlive `out`), and the output's place is
// recorded there (EncodeInferOutputs writes it). raw_input_contents then has one entry per input
// not in shared memory. NOT_FOUND for an unknown region, INVALID_ARGUMENT for bounds outside it,
// malformed parameters, or shared memory asked for without `shm`.
absl::Status ToInferenceRequest(const inference::ModelInferRequest& request, InferenceRequest* out,
                                const SharedMemoryManager* shm = nullptr,
                                SharedMemoryBindings* bindings = nullptr);

// The shared-memory parameters of a tensor (`what` names it): false when it has none.
absl::StatusOr<bool> SharedMemoryParameters(
    const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
    absl::string_view what, SharedMemoryRef* ref);

// ToInferenceRequest + BindRequest: `request` decoded against `model` (see BindRequest for what
// is rejected; typed contents must be in the field of their datatype and match the shape's
// element count).
absl::StatusOr<DecodedRequest> DecodeInferRequest(const inference::ModelInferRequest& request,
                                                  const engine::Model& model);

// Appends the selected `outputs` (indices into Model::outputs(), `values` in Model::outputs()
// order) to `response` as tensors with datatype and shape plus one raw_output_contents entry each.
// Unimplemented for outputs that are sequences or empty optionals (not expressible in KServe v2).
// Outputs `shm` places in shared memory are written there (no raw_output_contents entry, as
// Triton; parameters shared_memory_region and shared_memory_byte_size tell where).
absl::Status EncodeInferOutputs(const engine::Model& model, const std::vector<int>& outputs,
                                const std::vector<engine::Value>& values,
                                inference::ModelInferResponse* response,
                                const SharedMemoryBindings* shm = nullptr);

// The serialized inference.ModelInferResponse {model_name, model_version, id, the selected
// `outputs` as EncodeInferOutputs appends them} written straight from the tensors into `bytes`:
// one buffer of the exact size, each tensor's bytes copied once (a message built first, then
// serialized, copies them twice and allocates a string per output). The same bytes as that
// message's serialization, and the same errors as EncodeInferOutputs.
absl::Status SerializeInferResponse(absl::string_view model_name, absl::string_view model_version,
                                    absl::string_view id, const engine::Model& model,
                                    const std::vector<int>& outputs,
                                    const std::vector<engine::Value>& values,
                                    grpc::ByteBuffer* bytes);

// Appends one tensor to `response` as output `name` (datatype, shape, one raw_output_contents
// entry): an iteration's slice when streaming.
absl::Status EncodeOutputTensor(const std::string& name, const engine::Tensor& tensor,
                                inference::ModelInferResponse* response);

}  // namespace loopserve::server
