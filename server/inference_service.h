#pragma once

#include <atomic>

#include "proto/grpc_service.grpc.pb.h"
#include "server/metrics.h"
#include "server/model_repository.h"
#include "server/worker_pool.h"

namespace loopserve::server {

// The inference.GRPCInferenceService implementation on gRPC's callback API.
//
// Metadata RPCs answer on the gRPC thread. ModelInfer pins the model version, decodes and
// validates the request on the gRPC thread (bad requests are answered at once), then hands the run
// to the WorkerPool; a full queue answers RESOURCE_EXHAUSTED immediately, so gRPC threads never
// block. The worker answers DEADLINE_EXCEEDED / CANCELLED without running when the request expired
// or was cancelled while queued; otherwise it runs the engine with the call's deadline and a
// cancellation flag that the reactor's OnCancel sets (checked by the engine every Loop iteration).
// Exceptions stop at the handler boundary (INTERNAL). (OnCancel is delivered by gRPC 1.51 for client
// cancellation and expired deadlines; server_test checks both paths.)
//
// Not implemented (gRPC answers UNIMPLEMENTED): ModelStreamInfer, ModelStatistics,
// RepositoryModelLoad/Unload.
//
// Thread-safe. Borrows the registry, pool and metrics, which must outlive the grpc::Server that
// serves this service (including its Shutdown). `metrics` may be null.
class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  InferenceService(const ModelRegistry* registry, WorkerPool* pool, Metrics* metrics);

  // After this, ServerReady answers false and new ModelInfer calls get UNAVAILABLE.
  void StartDraining() { draining_.store(true); }

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
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;

 private:
  class InferCall;

  const ModelRegistry* registry_;
  WorkerPool* pool_;
  Metrics* metrics_;
  std::atomic<bool> draining_{false};
};

}  // namespace loopserve::server
