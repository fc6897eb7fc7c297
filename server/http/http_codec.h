#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "engine/tensor/value.h"
#include "google/protobuf/message.h"
#include "proto/grpc_service.pb.h"
#include "server/observability/logging.h"
#include "server/observability/tracer.h"
#include "server/repository/load_override.h"
#include "server/runner/infer_request.h"
#include "server/shm/shared_memory.h"

namespace loopserve::server {

// KServe v2 REST bodies <-> the protocol-free request (infer_request.h) and engine values,
// including Triton's binary tensor data extension. JSON is parsed with simdjson (DOM; measured
// fastest of Debian's JSON libraries on a 1 MB tensor: bench/json_bench.cc) and written with
// RapidJSON's writer (numbers as std::to_chars prints them: the shortest text that reads back to
// the same value).
//
// Datatypes in JSON `data`: BOOL as true/false; integer types as JSON integers in range; FP32 and
// FP64 as any JSON number; FP16 and BF16 only as binary data (as Triton); BYTES as JSON strings
// (in binary data: each element a 4-byte little-endian length and its bytes). `data` may be flat
// or nested (row-major); its element count must match the shape.

// Which outputs a REST request wants as binary data: the request's
// parameters.binary_data_output, overridden per output by outputs[].parameters.binary_data.
struct RestOutputs {
  bool binary_default = false;
  std::vector<std::pair<std::string, bool>> requested;  // requested outputs: name, binary
  bool Binary(absl::string_view name) const;
};

// The tensors of a REST request that name shared memory (parameters shared_memory_region,
// shared_memory_offset, shared_memory_byte_size): inputs by index into InferenceRequest::inputs
// (whose raw bytes the adapter points at the region), outputs by name.
struct RestSharedMemory {
  std::vector<std::pair<size_t, SharedMemoryRef>> inputs;
  std::vector<std::pair<std::string, SharedMemoryRef>> outputs;
};

// Parses inference request bodies. Reuses its buffers from body to body (up to kKeepBytes
// worth; a larger body's are released after the next Parse). The InferenceRequest a Parse fills
// has decoders that read the parsed document: bind it (InferenceRunner::Submit) before the next
// Parse. One per thread; not thread-safe.
class RestInferParser {
 public:
  static constexpr size_t kKeepBytes = size_t{4} << 20;
  RestInferParser();
  ~RestInferParser();

  // Parses `body` into `request` (inputs, outputs, id, parameters; the model name and version
  // come from the URL and are left alone) and `outputs`. `endpoint` ("infer", "generate_stream")
  // names the request in the errors about the body as a whole. `header_length` is the
  // Inference-Header-Content-Length header (nullptr when absent: the whole body is JSON);
  // binary inputs view the bytes after the JSON, so `body` must outlive the request. `body` must
  // have 64 readable bytes past its end. InvalidArgument, naming the field or tensor, for
  // malformed JSON, missing or mistyped fields, and binary sizes that do not add up.
  // Tensors in shared memory go to `shm` (an error when it is null).
  absl::Status Parse(absl::string_view endpoint, absl::string_view body, const char* header_length,
                     InferenceRequest* request, RestOutputs* outputs,
                     RestSharedMemory* shm = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Encodes the response: JSON, with each output's `data` or (when `outputs` says binary) its
// bytes after the JSON and parameters.binary_data_size. `body` receives everything;
// `json_length` the length of the JSON part (for Inference-Header-Content-Length, when any output
// is binary; otherwise it equals body->size()). Unimplemented for sequence or empty outputs,
// InvalidArgument for FP16/BF16 outputs asked for as JSON.
// `stream`, for a response of a streamed request (server-sent events), adds its response
// parameters.
struct RestStreamParameters {
  int64_t iteration = -1;       // parameters.iteration; -1: none (the final response)
  bool final_response = false;  // parameters.triton_final_response
};
absl::Status EncodeRestResponse(const engine::Model& model, absl::string_view model_name,
                                absl::string_view model_version, absl::string_view id,
                                const std::vector<int>& outputs,
                                const std::vector<engine::Value>& values, const RestOutputs& binary,
                                std::string* body, size_t* json_length,
                                const RestStreamParameters* stream = nullptr,
                                const SharedMemoryBindings* shm = nullptr);

// One iteration's response of a `stream_iterations` request, as JSON (all data as JSON, none
// binary): `slices` (Model::outputs() indices, response order) as outputs, and the parameters
// iteration and triton_final_response: false. InvalidArgument for FP16/BF16 slices (JSON
// cannot carry them).
absl::Status EncodeRestSlices(const engine::Model& model, absl::string_view model_name,
                              absl::string_view model_version, absl::string_view id,
                              int64_t iteration, absl::Span<const engine::ScanSlice> slices,
                              std::string* json);

// A protobuf message as JSON with the proto's field names, 64-bit integers as JSON numbers (not
// strings, as protobuf's own printer does), enums by name, maps as objects; scalar and repeated
// fields always (as Triton prints them), message and oneof fields when set. The REST adapter's
// printer for metadata, config, statistics and the repository index.
std::string ProtoToJson(const google::protobuf::Message& message);

// The optional bodies of Triton's repository requests: POST /v2/repository/index
// ({"ready": bool}) -> `ready`; POST .../load ({"parameters": {"config": "<ModelConfig JSON>",
// "file:<path>": "<base64 contents>"}}) -> the load parameters. An empty body is the default.
// InvalidArgument for anything else.
absl::StatusOr<bool> ParseIndexBody(absl::string_view body);
absl::StatusOr<LoadParameters> ParseLoadBody(absl::string_view body);

// The body of POST /v2/systemsharedmemory/region/{name}/register.
struct SharedMemoryRegistration {
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};
// {"key": string, "offset": int (default 0), "byte_size": int}; InvalidArgument otherwise.
absl::StatusOr<SharedMemoryRegistration> ParseSharedMemoryRegisterBody(absl::string_view body);

// Triton's generate extension (POST .../generate, .../generate_stream) takes a flat body: each
// key but "id" and "parameters" is an input, by name, whose JSON value (a scalar or a nested
// array) is its data. Whether `body` is such a flat body (a JSON object without "inputs"; a body
// that is not JSON counts as not flat, and the KServe parser reports it).
bool IsFlatGenerateBody(absl::string_view body);
// The flat generate `body` as a KServe v2 /infer body, typed by the model's `metadata`: each
// input's datatype is the declared one, its shape the value's nested-array dims with leading 1s
// added up to the declared rank (a scalar for a [1] or [-1, 1] input becomes [1] or [1, 1]).
// "id" and "parameters" are kept. InvalidArgument for a key that is no input of the model.
absl::StatusOr<std::string> GenerateToInferBody(absl::string_view body,
                                                const inference::ModelMetadataResponse& metadata);
// A KServe v2 JSON response (EncodeRestResponse / EncodeRestSlices, all outputs as JSON data) as
// Triton's generate response: model_name, model_version, id and parameters kept, and each output
// as a key of its own: a scalar when it has one element, otherwise its (flat) data array.
absl::StatusOr<std::string> InferToGenerateResponse(absl::string_view json);

// Triton's logging extension over REST: POST /v2/logging's body ({"log_info": true,
// "log_verbose_level": 1, "log_file": "x.log", ...}: booleans, non-negative integers, strings)
// and the settings as the JSON object GET /v2/logging answers.
absl::StatusOr<LogSettingList> ParseLogSettingsBody(absl::string_view body);
std::string LogSettingsJson(const LogSettingList& settings);

// Triton's trace extension over REST (POST /v2/trace/setting: {"trace_level": ["OFF"],
// "trace_rate": "1000", ...}: each value a string, a list of strings, or null to clear it; also
// /v2/models/<m>/trace/setting)
// and the settings as GET /v2/trace/setting answers them (lists of one value as a string, as
// Triton prints them).
absl::StatusOr<TraceSettingList> ParseTraceSettingsBody(absl::string_view body);
std::string TraceSettingsJson(const TraceSettingList& settings);

// {"error": "<message>"} with the message JSON-escaped.
std::string ErrorJson(absl::string_view message);

}  // namespace loopserve::server
