#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "grpcpp/server.h"
#include "server/grpc/inference_service.h"
#include "server/http/http_service.h"
#include "server/http/metrics_exposer.h"
#include "server/observability/metrics.h"
#include "server/repository/model_repository.h"
#include "server/runner/inference_runner.h"
#include "server/scheduling/worker_pool.h"
#include "server/server_api.h"

namespace loopserve::server {

// How the set of served models changes after startup (Triton's --model-control-mode).
enum class ModelControlMode {
  kNone,      // load the repository once at startup
  kPoll,      // also rescan it every repository_poll_interval
  kExplicit,  // load only `load_models` at startup; then RepositoryModelLoad/Unload
};

// Parses "none", "poll" or "explicit".
absl::StatusOr<ModelControlMode> ParseModelControlMode(absl::string_view name);

struct ServerOptions {
  std::string model_repository;  // root folder; this or config_path is required
  // OpenVINO Model Server's config.json: serve the models it lists from their base paths (poll
  // mode re-reads it) instead of a repository root.
  std::string config_path;
  // Triton's --disable-auto-complete-config: every model needs a complete config.pbtxt.
  bool disable_auto_complete_config = false;
  std::string address = "0.0.0.0";  // for gRPC, HTTP and metrics
  int grpc_port = 8001;             // 0 = pick a free port
  // KServe v2 REST (HttpService); 0 = pick a free port; -1 = none. The loopserve binary's
  // --http_port defaults to 8000 (Triton's); in-process servers (tests) opt in.
  int http_port = -1;
  int http_threads = 2;             // HTTP event threads (each serves many connections)
  int metrics_port = 8002;          // 0 = pick a free port; -1 = no metrics endpoint
  int workers = 2;                  // worker threads running the engine
  int intra_op_threads = 0;         // oneDNN threads per worker; 0 = cores / workers (at least 1)
  int max_queue_size = 64;          // requests waiting for a worker; more -> RESOURCE_EXHAUSTED
  int64_t max_loop_iterations = 0;  // per Loop execution; 0 = unlimited
  // How Loops use the intra-op threads (engine::RunOptions::loop_threads); a model's config.pbtxt
  // may set its own (parameters key loop_threads).
  engine::LoopThreads loop_threads = engine::LoopThreads::kAdaptive;
  // Precision of the products (engine::LoadOptions::precision); a model's config.pbtxt may set its
  // own (parameters key precision). `force_precision`: bf16 loads on a CPU without native bf16.
  engine::LoadOptions::Precision precision = engine::LoadOptions::Precision::kFp32;
  bool force_precision = false;
  // Cap on the output bytes of one request (each growing Loop scan output, and the final outputs);
  // 0 = max_message_bytes (a bigger answer could not be sent anyway).
  int64_t max_output_bytes = 0;
  // Cap on the tensor bytes one request may hold at once (engine::RunOptions::max_memory_bytes),
  // also the cap on a model's constants at load; a model's config.pbtxt may set its own. 0 =
  // automatic: the memory the process may use (its cgroup's limit, else physical memory) divided
  // by 2 x workers.
  int64_t max_request_memory_bytes = 0;
  // Largest model file read (model.onnx, model.xml, model.bin each); 0 = 2 GiB.
  int64_t max_model_file_bytes = 0;
  // Largest gRPC message received or sent, and largest HTTP request body (413 beyond it).
  int max_message_bytes = 1 << 30;
  absl::Duration exit_timeout = absl::Seconds(30);  // drain limit in Shutdown
  // Shutdown's first phase: this long the server reports not ready (health NOT_SERVING,
  // /v2/health/ready 503) but still serves new requests, so load balancers stop routing to it
  // before it refuses any. Zero: it drains at once.
  absl::Duration drain_delay = absl::ZeroDuration();
  // > 0: not ready while more than this many requests wait for a worker (ServerApi).
  int unready_queue_depth = 0;
  ModelControlMode model_control_mode = ModelControlMode::kPoll;
  absl::Duration repository_poll_interval = absl::Seconds(2);  // kPoll; <= 0 disables polling
  std::vector<std::string> load_models;  // kExplicit: models loaded at startup ("*" = all)
  // TLS for the gRPC and HTTP ports: PEM files. Both cert and key, or neither (plaintext). With
  // client_ca, clients must present a certificate signed by it (mutual TLS).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  ModelLoader model_loader;  // default engine::Model::Load (tests inject their own)
  // Requests to a version whose recent runs averaged under this run on the gRPC thread when a
  // worker slot is free (InferenceService); zero: every run goes through the worker queue.
  absl::Duration inline_run_limit = absl::Milliseconds(1);
  // How many such runs at once, at most (and never more than `workers`); 0 = `workers`, less one
  // of gRPC's callback threads (cores / 2, 2 to 16), at least 1: a run its version's recent runs
  // promised short may still be long, and a thread must stay free to receive requests. A hand-off
  // to a worker costs two thread switches and about 10 us of CPU per request (issue 34,
  // bench/RESULTS.md).
  int max_inline_runs = 0;
  // The stop request: set it (from any thread, or a signal handler: the atomic is lock-free) to
  // abandon a Start in progress, which then stops loading models (a warm-up run in progress is
  // cancelled as a request would be; a model file being compiled finishes first), releases what
  // it started and returns Cancelled. Shutdown sets it too, so a repository load in progress
  // (poller, RepositoryModelLoad) stops instead of delaying the exit. Not owned; must outlive the
  // server. Null: the server's own flag.
  std::atomic<bool>* stop = nullptr;
};

// The whole loopserve server, usable in-process (tests start it on 127.0.0.1:0).
//
// Start loads the repository or config.json (models that fail, including their warm-up, are
// reported not ready; the others are served; ServerOptions::stop set meanwhile: Cancelled),
// starts the worker pool, the gRPC server (OIP service + grpc.health.v1 + reflection; TLS when
// configured), the KServe v2 REST server (HttpService, same TLS), the metrics endpoint and, in poll
// mode, the repository poller, then returns. It logs one line per event but prints nothing on
// stdout: the loopserve binary prints exactly these lines to stdout (flushed), which integration
// tests parse:
//   loopserve: grpc listening on <address>:<port>
//   loopserve: http listening on <address>:<port>          (or "loopserve: http disabled")
//   loopserve: metrics listening on <address>:<port>       (or "loopserve: metrics disabled")
//
// Shutdown: health -> NOT_SERVING and ServerReady/ModelReady -> false; for drain_delay new calls
// are still served (a balancer's health checks see the change first); then new ModelInfer calls get
// UNAVAILABLE while the server still answers; the poller stops; ModelInfer calls in flight finish
// (up to exit_timeout); then every call still in flight is cancelled (InferenceService::CancelAll:
// a running Loop stops at its next iteration, a large kernel at its next chunk, a queued request
// is answered without running), gRPC and HTTP stop, the worker pool drains and joins, the metrics
// endpoint closes. Idempotent; the destructor calls it.
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
  int http_port() const { return http_port_; }        // -1 when disabled
  int metrics_port() const { return metrics_port_; }  // -1 when disabled
  const ServerOptions& options() const { return options_; }

  void Shutdown();

  ModelRegistry& registry() { return *registry_; }
  Metrics& metrics() { return *metrics_; }
  WorkerPool& worker_pool() { return *pool_; }  // tests occupy workers through it

 private:
  explicit Server(ServerOptions options);
  // Start-up, in order: the options checked, the gRPC/HTTP transport (TLS files read), the limits
  // the options leave to the machine, the registry with its first loads, the pool and the runner,
  // then the gRPC, HTTP and metrics listeners.
  absl::Status Init();
  // The flags' ranges and combinations: InvalidArgument naming the flag.
  absl::Status CheckOptions() const;
  struct Transport {
    std::shared_ptr<grpc::ServerCredentials> credentials;
    std::string name;  // "plaintext", "TLS", "mutual TLS" (for the log)
  };
  absl::StatusOr<Transport> MakeTransport() const;
  // What the options leave at 0 ("auto"), decided for this machine.
  struct Limits {
    int intra_op_threads = 1;  // workers x intra-op threads <= cores
    int64_t max_output_bytes = 0;
    int64_t max_request_memory_bytes = 0;
  };
  Limits DeriveLimits() const;
  void LogStart(const Limits& limits) const;
  // Metrics and the registry, and the models present at start; Cancelled when stopped meanwhile.
  absl::Status StartRegistry(const Limits& limits);
  void StartRunner(const Limits& limits);
  absl::Status StartGrpc(const Transport& transport);
  absl::Status StartHttp(const Transport& transport);
  absl::Status StartMetrics();
  absl::Status LoadInitialModels();
  void PollRepository();
  // Every kTrimInterval, hands free heap pages back to the kernel when glibc holds more than
  // kTrimAboveBytes of them (a large message gRPC read and then rejected, or any burst).
  void TrimHeap();
  static constexpr absl::Duration kTrimInterval = absl::Seconds(5);
  // The registry's loader threads: models loading (or warming up) at once, each on its own.
  static constexpr int kLoaderThreads = 4;
  static constexpr size_t kTrimAboveBytes = size_t{32} << 20;

  ServerOptions options_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<ModelRegistry> registry_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<InferenceRunner> runner_;
  // Before api_: a repository change the API finishes after Shutdown still finds the HTTP server.
  std::unique_ptr<HttpService> http_;
  std::unique_ptr<ServerApi> api_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<MetricsExposer> exposer_;
  int grpc_port_ = 0;
  int http_port_ = -1;
  int metrics_port_ = -1;
  absl::Notification stop_polling_;  // also stops the heap trimmer
  std::thread poller_;
  std::thread trimmer_;
  std::atomic<bool> own_stop_{false};
  std::atomic<bool>* const stop_;  // options_.stop, or &own_stop_
  absl::Mutex shutdown_mutex_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mutex_) = false;
};

}  // namespace loopserve::server
