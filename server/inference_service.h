#pragma once

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/inference_runner.h"
#include "server/server_api.h"

namespace loopserve::server {

namespace internal {
using Grpc = inference::GRPCInferenceService;
// GRPCInferenceService::CallbackService with ModelInfer and ModelStreamInfer raw. The raw and the
// typed ModelStreamInfer differ only in their return type, so the typed one is left out of the
// chain rather than overridden.
using InferenceServiceBase =
    Grpc::WithRawCallbackMethod_ModelInfer<Grpc::WithRawCallbackMethod_ModelStreamInfer<
        Grpc::WithCallbackMethod_ServerLive<Grpc::WithCallbackMethod_ServerReady<
            Grpc::WithCallbackMethod_ModelReady<Grpc::WithCallbackMethod_ServerMetadata<
                Grpc::WithCallbackMethod_ModelMetadata<Grpc::WithCallbackMethod_ModelInfer<
                    Grpc::WithCallbackMethod_ModelConfig<Grpc::WithCallbackMethod_ModelStatistics<
                        Grpc::WithCallbackMethod_RepositoryIndex<
                            Grpc::WithCallbackMethod_RepositoryModelLoad<
                                Grpc::WithCallbackMethod_RepositoryModelUnload<
                                    Grpc::Service>>>>>>>>>>>>>;
}  // namespace internal

// The gRPC adapter: inference.GRPCInferenceService on gRPC's callback API over the protocol-free
// InferenceRunner (ModelInfer) and ServerApi (everything else). Its own concerns are gRPC's:
// messages in and out, the call's deadline, its cancellation and its completion protocol.
//
// ModelInfer is registered raw (bytes in, bytes out) so that the service parses the request
// itself: bytes that are not a ModelInferRequest get INVALID_ARGUMENT (gRPC's generated handler
// answers UNIMPLEMENTED with an empty message), and the request body is released as soon as it
// is parsed. gRPC buffers a whole message, up to the server's max receive size, before any
// handler runs. After a request of kTrimAfterRequestBytes or more, free heap pages are handed
// back to the kernel (malloc_trim), so one large request does not raise the resident size for
// good. The call's deadline and the `timeout` parameter (int64 microseconds), whichever comes
// first, bound the request; gRPC's OnCancel (client cancellation, expired deadline) cancels it,
// and while it runs on the gRPC thread (InferenceRunner's inline runs, whose OnCancel gRPC
// delivers only after the handler returns) the runner polls ServerContext::IsCancelled.
// A call answered inside the handler (an error, a run on the gRPC thread) answers through the
// context's default reactor, whose completion gRPC handles without a thread hop; a queued call is
// its own reactor so that OnCancel reaches the running engine.
//
// ModelStreamInfer (Triton's bidirectional stream, also raw): each request read from the stream
// goes through the runner like a ModelInfer call (same validation, limits, deadline — the
// stream's and the request's `timeout` —, metrics), several at once; each answer is a
// ModelStreamInferResponse (`error_message` for a failed request, which leaves the stream open),
// written in the order produced, so one request's responses keep their order. With
// `stream_iterations: true` a request gets one response per iteration of the model's top-level
// Loop (its scan outputs' slices, parameters `iteration` and `triton_final_response: false`),
// then the final one (`triton_final_response: true`, as every response of a request without it).
// At most kStreamWindow iteration responses of one request wait to be written; past that its Loop
// waits for the client to read (up to the request's deadline, stopping within a poll interval of
// a cancel). A stream with kStreamMaxPending requests in flight or answers unwritten reads no
// further request until the client has read half of them. A client that cancels or breaks the
// stream cancels its requests in flight; the stream ends (OK) once the client has half-closed it
// and every request is answered.
//
// Thread-safe. Borrows the runner and the API, which must outlive the grpc::Server serving this
// service (including its Shutdown).
class InferenceService final : public internal::InferenceServiceBase {
 public:
  InferenceService(InferenceRunner* runner, ServerApi* api) : runner_(runner), api_(api) {}

  // Requests at least this large are followed by malloc_trim.
  static constexpr size_t kTrimAfterRequestBytes = size_t{64} << 20;
  // Iteration responses of one streamed request queued unwritten before its Loop waits.
  static constexpr int kStreamWindow = InferenceCall::kStreamWindow;
  // Requests in flight plus responses unwritten on one stream before it reads no more requests.
  static constexpr size_t kStreamMaxPending = 64;

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  // Triton's model-configuration extension: the complete config of the version.
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  // Raw: the request and response are serialized inference.ModelInferRequest/Response.
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  // Raw: requests are serialized inference.ModelInferRequest, responses
  // inference.ModelStreamInferResponse.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;

 private:
  class InferCall;
  class Stream;
  class StreamCall;

  // Finishes a repository change's call with the outcome of ServerApi::Load/Unload.
  static grpc::ServerUnaryReactor* RepositoryChange(
      grpc::CallbackServerContext* context, absl::string_view rpc,
      absl::FunctionRef<absl::Status(ServerApi::Done done)> schedule);

  InferenceRunner* const runner_;
  ServerApi* const api_;
};

}  // namespace loopserve::server
