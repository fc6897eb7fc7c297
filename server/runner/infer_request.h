#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/value.h"

namespace loopserve::server {

// An inference request as the protocol adapters hand it to the InferenceRunner, whatever protocol
// it came over (gRPC ModelInfer, REST /infer): what the client asked for, with each input's
// contents still in the protocol's encoding until the request is bound to a model (BindRequest).
// The gRPC adapter fills it from a ModelInferRequest (tensor_codec.h), the HTTP adapter from
// JSON and Triton's binary extension (http_codec.h). Move-only because of the decoders.
struct InferenceRequest {
  struct Input {
    std::string name;
    std::string datatype;                   // KServe spelling, as sent ("FP32", ...)
    absl::InlinedVector<int64_t, 6> shape;  // as sent, not yet validated (no allocation to rank 6)
    // The contents: `raw` bytes (little-endian elements back to back; BYTES elements each a
    // 4-byte little-endian length and that many bytes) when `decode` is null, otherwise
    // `decode`, which turns the protocol's typed representation (gRPC typed contents, JSON
    // `data`) into a tensor of the checked type and shape. `raw` is borrowed: the adapter keeps
    // its bytes alive until the request is finished, because the decoded tensor may view them.
    // `decode` is called at most once, before InferenceRunner::Submit returns; `what` names the
    // tensor for messages ("input 'x'").
    absl::string_view raw;
    std::function<absl::StatusOr<engine::Tensor>(const std::string& what, engine::DataType dtype,
                                                 const engine::Shape& shape)>
        decode;
  };

  std::string model_name;
  std::string model_version;  // "" = the latest ready version
  std::string id;             // echoed in the response
  std::vector<Input> inputs;
  // Names of the outputs wanted, in response order; empty = all of the model's outputs.
  std::vector<std::string> outputs;
  // Triton's `timeout` request parameter in microseconds; 0 = none. The adapters check its type.
  int64_t timeout_us = 0;
  // The `stream_iterations` request parameter (bool): one response per iteration of the model's
  // top-level Loop (only where the protocol can stream: ModelStreamInfer). The adapters check its
  // type; the runner checks that the call can stream and the model has scan outputs to stream.
  bool stream_iterations = false;
  // Triton's sequence parameters (models with `sequence_batching`): `sequence_id` (uint64, or a
  // string), `sequence_start`, `sequence_end`. The adapters check their types; the runner checks
  // them against the model (server/scheduling/sequence_batcher.h).
  struct Sequence {
    uint64_t id = 0;        // 0 = none (Triton reserves 0 for requests outside a sequence)
    std::string string_id;  // "" = none; a sequence has a numeric or a string id, not both
    bool start = false;
    bool end = false;
    bool present() const { return id != 0 || !string_id.empty(); }
  };
  Sequence sequence;
  // What raw contents are called in messages: "raw_input_contents" (gRPC), "binary data" (REST).
  absl::string_view raw_field = "raw_input_contents";
  // A malformed request (bad JSON, inconsistent contents) that still names its model: the runner
  // answers this error once the model is known, so it counts in that model's metrics.
  absl::Status error;
};

// A request bound to a model's signature (BindRequest).
struct DecodedRequest {
  // One value per model input, in Model::inputs() order. Raw inputs whose bytes are suitably
  // aligned are zero-copy views of the request's raw bytes, so those must outlive every use of
  // these values; the others own copies. An omitted optional input is a kNone value.
  std::vector<engine::Value> inputs;
  // Model output indices to return, in response order (all outputs when none were requested).
  std::vector<int> outputs;
};

// The header (HTTP) or metadata key (gRPC) a client sends a sequence's id in, so that a load
// balancer can hash on it and send every step of a sequence to the replica holding its state
// (server/OPERATIONS.md, "Sticky sequences").
inline constexpr char kSequenceIdHeader[] = "loopserve-sequence-id";

// Applies the kSequenceIdHeader value `header` (absent: nullopt) to `request`: without a
// `sequence_id` parameter, the header's value becomes the sequence id (digits: a uint64, else a
// string); with one, the two must name the same sequence. INVALID_ARGUMENT when they differ or the
// header is empty or longer than 256 bytes.
absl::Status ApplySequenceIdHeader(std::optional<absl::string_view> header,
                                   InferenceRequest* request);

// The one validation of a request against a model, shared by every protocol. InvalidArgument,
// naming the tensor, for: an unknown or repeated input, a missing required input, a sequence
// input (KServe v2 cannot carry one), an unknown datatype or one that differs from the declared
// type, negative or overflowing dims, contents that do not fit the shape (DecodeRawTensor, or
// the adapter's decoder), an unknown or repeated output name. Checks names and types before any
// contents are decoded, so a bad request never allocates for its declared shape.
// `server_inputs`: model input indices the server feeds (sequence control and state inputs): a
// request may not send them (InvalidArgument) and they are not required.
absl::StatusOr<DecodedRequest> BindRequest(InferenceRequest& request, const engine::Model& model,
                                           absl::Span<const int> server_inputs = {});

// Raw contents -> tensor: `bytes` must hold exactly the shape's elements of `dtype`,
// little-endian. Aligned bytes become a zero-copy view (so they must outlive the tensor),
// others are copied. `field` names where the bytes came from in the message
// ("raw_input_contents", "binary data").
absl::StatusOr<engine::Tensor> DecodeRawTensor(const std::string& what, absl::string_view bytes,
                                               engine::DataType dtype, const engine::Shape& shape,
                                               absl::string_view field);

// How many bytes AppendRawTensor appends for `tensor`.
size_t RawTensorSize(const engine::Tensor& tensor);

// Tensor -> raw contents, as DecodeRawTensor reads them, appended to `out`. `what` names the
// tensor in messages ("output 'y'").
absl::Status AppendRawTensor(const std::string& what, const engine::Tensor& tensor,
                             std::string* out);

}  // namespace loopserve::server
