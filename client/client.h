#pragma once

// A small C++ client for the Open Inference Protocol (KServe v2) that loopserve, Triton and
// OpenVINO Model Server speak: over gRPC (plus grpc.health.v1) or over HTTP/REST (http_client.h).

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/http_client.h"
#include "client/tensor.h"
#include "proto/grpc_service.grpc.pb.h"
#include "proto/health.grpc.pb.h"

namespace loopserve::client {

// Converts a gRPC status to an absl::Status with the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// Cancels one call from another thread (gRPC's ClientContext::TryCancel underneath).
//
// Pass it in InferOptions; call Cancel() from any thread at any time. A token cancelled before its
// call starts makes the call return CANCELLED without sending anything. One token serves one call
// at a time; it may be reused for later calls only if never cancelled. Thread-safe. Must outlive
// the call it is passed to.
class CancelToken {
 public:
  CancelToken() = default;
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  void Cancel();
  bool cancelled() const;
  // Blocks until a call using this token has been started (its request handed to gRPC) or
  // `timeout` passes; true if started. Lets a test cancel a call that is really in flight.
  bool WaitForStart(absl::Duration timeout) const;

 private:
  friend class Client;
  // Called by Client around the call; Attach returns false if already cancelled.
  bool Attach(grpc::ClientContext* context);
  void Detach();

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Notification started_;
};

// Per-call options.
struct InferOptions {
  // Relative timeout and absolute deadline; the earlier of the two is sent to the server as the
  // gRPC deadline. Both infinite (the default) = no deadline.
  absl::Duration timeout = absl::InfiniteDuration();
  absl::Time deadline = absl::InfiniteFuture();
  std::string model_version;  // empty: the server's choice (latest)
  std::string request_id;     // echoed back in InferResult::id
  // Triton's sequence parameters (models with sequence_batching): a non-zero `sequence_id` or a
  // non-empty `sequence_string_id` names the sequence; start/end mark its first and last request.
  uint64_t sequence_id = 0;
  std::string sequence_string_id;
  bool sequence_start = false;
  bool sequence_end = false;
  ContentsMode contents = ContentsMode::kRaw;
  CancelToken* cancel = nullptr;  // optional; not owned
};

// What ModelInfer returned, decoded.
struct InferResult {
  std::string model_name;
  std::string model_version;
  std::string id;
  std::vector<Tensor> outputs;

  // The output named `name`, or nullptr.
  const Tensor* Find(absl::string_view name) const;
};

// Which protocol a Client speaks.
enum class Protocol { kGrpc, kHttp };

// Parses "grpc" or "http".
absl::StatusOr<Protocol> ParseProtocol(absl::string_view name);

// A connection to one server. Create() does not connect: the first call does, and fails with
// UNAVAILABLE when nothing listens. Calls other than Infer/InferRaw have a 30 s deadline. Every
// method is thread-safe (one gRPC channel, shared stubs) and blocks until the server answers or the
// call's deadline/cancellation ends it; errors carry the server's gRPC code and message unchanged.
class Client {
 public:
  // `address` is host:port (e.g. "127.0.0.1:8001"), plaintext.
  // With Protocol::kHttp every call goes over KServe v2 REST except HealthCheck and InferRaw
  // (gRPC messages; UNIMPLEMENTED); errors carry the code the HTTP status stands for
  // (CodeForHttpStatus) and the server's message.
  static absl::StatusOr<std::unique_ptr<Client>> Create(absl::string_view address,
                                                        Protocol protocol = Protocol::kGrpc);

  absl::StatusOr<bool> ServerLive();
  absl::StatusOr<bool> ServerReady();
  absl::StatusOr<bool> ModelReady(absl::string_view model, absl::string_view version = "");
  absl::StatusOr<inference::ServerMetadataResponse> ServerMetadata();
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(absl::string_view model,
                                                                 absl::string_view version = "");
  // Triton's ModelConfig: the complete configuration the version runs with.
  absl::StatusOr<inference::ModelConfig> ModelConfig(absl::string_view model,
                                                     absl::string_view version = "");
  // grpc.health.v1.Health/Check for `service` ("" = the whole server).
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> HealthCheck(
      absl::string_view service = "");

  // Runs `model` on `inputs`. `outputs` names the outputs wanted (empty = all the model has).
  absl::StatusOr<InferResult> Infer(absl::string_view model, const std::vector<Tensor>& inputs,
                                    const std::vector<std::string>& outputs = {},
                                    const InferOptions& options = {});
  // Runs `model` through ModelStreamInfer with `stream_iterations: true`: `on_slice` gets each
  // iteration's slices of the requested scan outputs as they arrive (on the calling thread), and
  // the final outputs are returned. gRPC only (UNIMPLEMENTED over HTTP). A request the server
  // rejects comes back with the server's message under UNKNOWN: the stream carries errors as
  // text (Triton's `error_message`), without a code.
  absl::StatusOr<InferResult> StreamInfer(
      absl::string_view model, const std::vector<Tensor>& inputs,
      const std::vector<std::string>& outputs, const InferOptions& options,
      absl::FunctionRef<void(int64_t iteration, const std::vector<Tensor>& slices)> on_slice);
  // Sends `request` as is (for callers that build requests themselves, e.g. malformed ones in
  // tests). Only timeout, deadline and cancel of `options` apply.
  absl::StatusOr<inference::ModelInferResponse> InferRaw(
      const inference::ModelInferRequest& request, const InferOptions& options = {});

  // Polls ServerReady until it answers true or `timeout` passes (then UNAVAILABLE or
  // DEADLINE_EXCEEDED with the last error).
  absl::Status WaitForReady(absl::Duration timeout);

  const std::string& address() const { return address_; }

 private:
  Client(std::string address, std::shared_ptr<grpc::Channel> channel);

  // Runs one unary call (`call(context)`) with the timeout and cancel token of `options`.
  template <typename Call>
  static absl::Status RunCall(const InferOptions& options, Call&& call);

  const std::string address_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  const std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
  std::unique_ptr<HttpClient> http_;  // set for Protocol::kHttp (then the gRPC members are null)
};

}  // namespace loopserve::client
