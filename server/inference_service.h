#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/metrics.h"
#include "server/model_repository.h"
#include "server/worker_pool.h"

namespace loopserve::server {

// The inference.GRPCInferenceService implementation on gRPC's callback API.
//
// Metadata RPCs answer on the gRPC thread; ModelMetadata and ModelConfig (Triton's
// model-configuration extension) describe the version as its config declares it. ModelInfer pins
// the model version, decodes and validates the request (against the model and its config's dims
// and reshapes) on the gRPC thread (bad requests are answered at once), then hands the run
// to the WorkerPool; a full queue answers RESOURCE_EXHAUSTED immediately, so gRPC threads never
// block. The worker answers DEADLINE_EXCEEDED / CANCELLED without running when the request expired
// or was cancelled while queued; otherwise it runs the engine with the call's deadline and a
// cancellation flag that the reactor's OnCancel sets (checked by the engine every Loop iteration).
// Exceptions stop at the handler boundary (INTERNAL). (OnCancel is delivered by gRPC 1.51 for
// client cancellation and expired deadlines; server_test checks both paths.)
//
// Short runs skip the hand-off: when the version's recent runs averaged under
// `Options::inline_run_limit` and the pool would start the run at once (WorkerPool::TryRunHere:
// a free slot of the pool's bound and of the version's instance cap, nothing runnable queued, and
// fewer than the pool's cap of such runs in progress),
// the gRPC thread runs it inside the handler and answers through the context's default reactor,
// saving the wake-up of a worker and the executor hop gRPC makes to complete a call with a
// reactor of ours. Such a run counts in every limit, metric and statistic like a queued one and
// keeps its deadline. gRPC delivers OnCancel only after the handler returns, so a watcher thread
// polls the calls running on gRPC threads (ServerContext::IsCancelled, every
// kInlineCancelPollInterval) and sets their cancellation flag: a client's cancel or a closed
// connection stops an inline run within one poll plus one Loop iteration.
//
// ModelInfer is registered raw (bytes in, bytes out) so that the service parses the request
// itself: bytes that are not a ModelInferRequest get INVALID_ARGUMENT (gRPC's generated handler
// answers UNIMPLEMENTED with an empty message), and the request body is released as soon as it
// is parsed. gRPC itself buffers a whole message, up to the server's max receive size, before
// any handler runs. After a request of kTrimAfterRequestBytes or more, free heap pages are
// handed back to the kernel (malloc_trim), so one large request does not raise the resident
// size for good.
//
// Limits per request: Triton's `timeout` request parameter (int64 microseconds; 0 = none) and the
// gRPC deadline, whichever comes first; the model's iteration cap and output-bytes cap (each Loop
// scan output while it grows, and the sum of the final outputs), both RESOURCE_EXHAUSTED.
//
// RepositoryModelLoad/Unload run on a loader thread of their own (never a gRPC or worker thread)
// and only when `Options::model_control` is set (explicit model control); otherwise they answer
// FAILED_PRECONDITION. ModelStatistics reports Triton's statistics plus loopserve's per-Loop ones.
// Not implemented (gRPC answers UNIMPLEMENTED): ModelStreamInfer.
//
// Thread-safe. Borrows the registry, pool and metrics, which must outlive the grpc::Server that
// serves this service (including its Shutdown). `metrics` may be null.
class InferenceService final
    : public inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
          inference::GRPCInferenceService::CallbackService> {
 public:
  struct Options {
    bool model_control = false;  // RepositoryModelLoad/Unload allowed (explicit mode)
    // Runs of versions whose recent runs took less on average may run on the gRPC thread;
    // zero: never.
    absl::Duration inline_run_limit = absl::ZeroDuration();
  };
  InferenceService(ModelRegistry* registry, WorkerPool* pool, Metrics* metrics, Options options);
  ~InferenceService() override;

  // How often the calls running on gRPC threads are polled for cancellation.
  static constexpr absl::Duration kInlineCancelPollInterval = absl::Milliseconds(5);
  // Requests at least this large are followed by malloc_trim.
  static constexpr size_t kTrimAfterRequestBytes = size_t{64} << 20;

  // After this, ServerReady and ModelReady answer false and new ModelInfer calls get UNAVAILABLE.
  void StartDraining() { draining_.store(true); }

  // Waits until no ModelInfer call is in flight or `deadline` passes; true when idle.
  bool WaitForIdle(absl::Time deadline);

  // Sets the cancellation flag of every ModelInfer call in flight (queued, on a worker or on a
  // gRPC thread) and of every later one: a running Loop stops at its next iteration, a queued
  // request is answered CANCELLED without running. For shutdown after the exit timeout.
  void CancelAll();

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

  // Links / unlinks a ModelInfer call in `calls_`.
  void CallStarted(InferCall* call);
  void CallFinished(InferCall* call);
  // Marks a call as running on the gRPC thread (polled for cancellation) or no longer so.
  void SetRunningInline(InferCall* call, bool running);
  // The watcher thread: polls inline runs for cancellation while there are any.
  void WatchInlineRuns();
  // Runs `change` on the loader thread and finishes the call with its status.
  grpc::ServerUnaryReactor* RunRepositoryChange(grpc::CallbackServerContext* context,
                                                absl::string_view rpc,
                                                const std::string& repository_name,
                                                std::function<absl::Status()> change);

  ModelRegistry* registry_;
  WorkerPool* pool_;
  Metrics* metrics_;
  const Options options_;
  std::atomic<bool> draining_{false};
  absl::Mutex calls_mutex_;
  int calls_in_flight_ ABSL_GUARDED_BY(calls_mutex_) = 0;
  InferCall* calls_ ABSL_GUARDED_BY(calls_mutex_) = nullptr;  // intrusive list of calls in flight
  int inline_runs_ ABSL_GUARDED_BY(calls_mutex_) = 0;         // calls running on gRPC threads
  bool cancel_all_ ABSL_GUARDED_BY(calls_mutex_) = false;
  bool stop_watcher_ ABSL_GUARDED_BY(calls_mutex_) = false;
  std::thread watcher_;  // WatchInlineRuns; joined by the destructor
  WorkerPool loader_;    // one thread for repository loads/unloads; joined by the destructor
};

}  // namespace loopserve::server
