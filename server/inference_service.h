#pragma once

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/inference_runner.h"
#include "server/server_api.h"

namespace loopserve::server {

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
// Not implemented (gRPC answers UNIMPLEMENTED): ModelStreamInfer.
//
// Thread-safe. Borrows the runner and the API, which must outlive the grpc::Server serving this
// service (including its Shutdown).
class InferenceService final
    : public inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
          inference::GRPCInferenceService::CallbackService> {
 public:
  InferenceService(InferenceRunner* runner, ServerApi* api) : runner_(runner), api_(api) {}

  // Requests at least this large are followed by malloc_trim.
  static constexpr size_t kTrimAfterRequestBytes = size_t{64} << 20;

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

  // Finishes a repository change's call with the outcome of ServerApi::Load/Unload.
  static grpc::ServerUnaryReactor* RepositoryChange(
      grpc::CallbackServerContext* context, absl::string_view rpc,
      absl::FunctionRef<absl::Status(ServerApi::Done done)> schedule);

  InferenceRunner* const runner_;
  ServerApi* const api_;
};

}  // namespace loopserve::server
