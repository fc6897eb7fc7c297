#pragma once

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/runner/inference_runner.h"
#include "server/server_api.h"

namespace loopserve::server {

namespace internal {
using Grpc = inference::GRPCInferenceService;
// GRPCInferenceService::CallbackService with every method raw (bytes in, bytes out): the service
// parses each request itself (see InferenceService).
using InferenceServiceBase = Grpc::WithRawCallbackMethod_ServerLive<
    Grpc::WithRawCallbackMethod_ServerReady<Grpc::WithRawCallbackMethod_ModelReady<
        Grpc::WithRawCallbackMethod_ServerMetadata<Grpc::WithRawCallbackMethod_ModelMetadata<
            Grpc::WithRawCallbackMethod_ModelInfer<Grpc::WithRawCallbackMethod_ModelStreamInfer<
                Grpc::WithRawCallbackMethod_ModelConfig<Grpc::WithRawCallbackMethod_ModelStatistics<
                    Grpc::WithRawCallbackMethod_RepositoryIndex<
                        Grpc::WithRawCallbackMethod_RepositoryModelLoad<
                            Grpc::WithRawCallbackMethod_RepositoryModelUnload<
                                Grpc::WithRawCallbackMethod_SystemSharedMemoryStatus<
                                    Grpc::WithRawCallbackMethod_SystemSharedMemoryRegister<
                                        Grpc::WithRawCallbackMethod_SystemSharedMemoryUnregister<
                                            Grpc::WithRawCallbackMethod_CudaSharedMemoryStatus<
                                                Grpc::WithRawCallbackMethod_CudaSharedMemoryRegister<
                                                    Grpc::WithRawCallbackMethod_CudaSharedMemoryUnregister<
                                                        Grpc::WithRawCallbackMethod_LogSettings<
                                                            Grpc::
                                                                WithRawCallbackMethod_TraceSetting<
                                                                    Grpc::
                                                                        Service>>>>>>>>>>>>>>>>>>>>;
}  // namespace internal

// The gRPC adapter: inference.GRPCInferenceService on gRPC's callback API over the protocol-free
// InferenceRunner (ModelInfer) and ServerApi (everything else). Its own concerns are gRPC's:
// messages in and out, the call's deadline, its cancellation and its completion protocol.
//
// Every method is registered raw (bytes in, bytes out) so that the service parses the request
// itself: bytes that are not the method's request message get INVALID_ARGUMENT naming the method
// and the message type (gRPC's generated handler answers UNIMPLEMENTED with an empty message), and
// ModelInfer's request body is released as soon as it is parsed. gRPC buffers a whole message, up
// to the server's max receive size, before any handler runs. After a request of
// kTrimAfterRequestBytes or more, free heap pages are handed back to the kernel (malloc_trim), so
// one large request does not raise the resident size for good. The call's deadline and the
// `timeout` parameter (int64 microseconds), whichever comes first, bound the request; gRPC's
// OnCancel (client cancellation, expired deadline) cancels it, and while it runs on the gRPC thread
// (InferenceRunner's inline runs, whose OnCancel gRPC delivers only after the handler returns) the
// runner polls ServerContext::IsCancelled. A call answered inside the handler (an error, a run on
// the gRPC thread) answers through the context's default reactor, whose completion gRPC handles
// without a thread hop; a queued call is its own reactor so that OnCancel reaches the running
// engine.
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

  // Unary methods: the request and the response are the serialized inference.<Method>Request
  // and inference.<Method>Response.
  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  // Triton's model-configuration extension: the complete config of the version.
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  // Requests are serialized inference.ModelInferRequest, responses
  // inference.ModelStreamInferResponse.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  // Triton's system shared-memory extension (ServerApi::shared_memory): register, unregister,
  // status. Inputs and outputs of ModelInfer and ModelStreamInfer name regions by parameters.
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) override;
  // Triton's logging extension: every setting, after applying the request's (logging.h).
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  // Triton's trace extension: the server's or a model's trace settings (Tracer::Update).
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  // CUDA shared memory: UNIMPLEMENTED naming CPU-only; status and unregister of every region
  // (name empty) answer OK with nothing, as a server without GPUs.
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) override;

 private:
  class InferCall;
  class Stream;
  class StreamCall;

  InferenceRunner* const runner_;
  ServerApi* const api_;
};

}  // namespace loopserve::server
