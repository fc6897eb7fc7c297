#pragma once

// The Open Inference Protocol (KServe v2) over HTTP/REST, as Client speaks it when created with
// Protocol::kHttp: libcurl underneath, JSON headers, and Triton's binary tensor data extension for
// raw tensors (inputs and outputs travel as bytes after the JSON).

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/grpc_service.pb.h"
#include "proto/model_config.pb.h"

namespace loopserve::client {

struct InferOptions;
struct InferResult;
struct Tensor;

// The canonical code an HTTP status stands for (the inverse of the server's HttpStatusFor; 413
// RESOURCE_EXHAUSTED, 405/415 INVALID_ARGUMENT's neighbours UNIMPLEMENTED / INVALID_ARGUMENT).
absl::StatusCode CodeForHttpStatus(long status);

// One server's REST endpoints. Thread-safe: each call takes a libcurl handle from a pool (one per
// concurrent caller, kept for keep-alive) and returns it afterwards.
class HttpClient {
 public:
  // `address` is host:port.
  explicit HttpClient(absl::string_view address);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  absl::StatusOr<bool> ServerLive();
  absl::StatusOr<bool> ServerReady();
  absl::StatusOr<bool> ModelReady(absl::string_view model, absl::string_view version);
  absl::StatusOr<inference::ServerMetadataResponse> ServerMetadata();
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(absl::string_view model,
                                                                 absl::string_view version);
  absl::StatusOr<inference::ModelConfig> ModelConfig(absl::string_view model,
                                                     absl::string_view version);
  // ContentsMode::kRaw: inputs and outputs as binary data (Triton's extension); kTyped: both as
  // JSON `data`. options.timeout/deadline bound the transfer and are sent as the
  // `timeout` parameter; options.cancel aborts the transfer (checked every few milliseconds).
  absl::StatusOr<InferResult> Infer(absl::string_view model, const std::vector<Tensor>& inputs,
                                    const std::vector<std::string>& outputs,
                                    const InferOptions& options);

 private:
  struct Response {
    long status = 0;
    std::string body;
    std::string header_length;  // Inference-Header-Content-Length, "" when absent
  };
  // Sends one request; transport failures are UNAVAILABLE (or DEADLINE_EXCEEDED, CANCELLED).
  absl::StatusOr<Response> Send(const char* method, const std::string& path,
                                const std::string& body, const std::vector<std::string>& headers,
                                absl::Time deadline, const InferOptions* options);
  // A 200 answer's body, or the error its {"error": ...} names.
  absl::StatusOr<Response> Call(const char* method, const std::string& path,
                                const std::string& body = "");
  // GET `path`: true on 200, false on 503 (the server answered "not ready"), else the error.
  absl::StatusOr<bool> Probe(const std::string& path);
  static absl::Status ErrorOf(const Response& response);
  std::string ModelPath(absl::string_view model, absl::string_view version) const;

  const std::string base_url_;
  absl::Mutex mu_;
  std::vector<void*> idle_ ABSL_GUARDED_BY(mu_);  // CURL easy handles
};

}  // namespace loopserve::client
