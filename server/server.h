#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/inference_service.h"
#include "server/metrics.h"
#include "server/model_repository.h"
#include "server/worker_pool.h"

namespace loopserve::server {

struct ServerOptions {
  std::string model_repository;     // root folder; required
  std::string address = "0.0.0.0";  // for both gRPC and metrics
  int grpc_port = 8001;             // 0 = pick a free port
  int metrics_port = 8002;          // 0 = pick a free port; -1 = no metrics endpoint
  int workers = 2;                  // worker threads running the engine
  int max_queue_size = 64;          // requests waiting for a worker; more -> RESOURCE_EXHAUSTED
  int64_t max_loop_iterations = 0;  // per Loop execution; 0 = unlimited
  absl::Duration exit_timeout = absl::Seconds(30);  // drain limit in Shutdown
  ModelLoader model_loader;  // default engine::Model::Load (tests inject their own)
};

// The whole loopserve server, usable in-process (tests start it on 127.0.0.1:0).
//
// Start loads the repository (models that fail are reported not ready; the others are served),
// starts the worker pool, the gRPC server (OIP service + grpc.health.v1 + reflection) and the
// metrics endpoint, then returns. It prints nothing: the caller reports the bound ports; the
// loopserve binary prints exactly these lines to stdout (flushed), which integration tests parse:
//   loopserve: grpc listening on <address>:<port>
//   loopserve: metrics listening on <address>:<port>       (or "loopserve: metrics disabled")
//
// Shutdown: health -> NOT_SERVING and ServerReady -> false, gRPC stops accepting calls and waits up
// to exit_timeout for calls in flight (after which it cancels them; a running Loop stops at its
// next iteration), the worker pool drains and joins, the metrics endpoint closes. Idempotent; the
// destructor calls it.
//
// Thread-safe. Owns everything it starts. Destruction order (members below) keeps the service,
// registry, pool and metrics alive until gRPC has finished every call.
class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }  // -1 when disabled
  const ServerOptions& options() const { return options_; }

  void Shutdown();

  ModelRegistry& registry() { return *registry_; }
  Metrics& metrics() { return *metrics_; }
  WorkerPool& worker_pool() { return *pool_; }  // tests occupy workers through it

 private:
  explicit Server(ServerOptions options);
  absl::Status Init();

  ServerOptions options_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<ModelRegistry> registry_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<MetricsExposer> exposer_;
  int grpc_port_ = 0;
  int metrics_port_ = -1;
  absl::Mutex shutdown_mutex_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mutex_) = false;
};

}  // namespace loopserve::server
