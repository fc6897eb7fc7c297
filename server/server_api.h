#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/grpc_service.pb.h"
#include "proto/model_config.pb.h"
#include "server/repository/load_override.h"
#include "server/repository/model_repository.h"
#include "server/runner/inference_runner.h"
#include "server/scheduling/worker_pool.h"
#include "server/shm/shared_memory.h"

namespace loopserve::server {

// The answers to everything but inference, whatever the protocol: health, metadata, Triton's
// model-configuration, model-repository and statistics extensions. The gRPC adapter copies them
// into its responses; the REST adapter prints them as JSON. The OIP messages are the common
// vocabulary (both protocols carry the same fields).
//
// Repository changes (Load/Unload) take seconds: they run on a loader thread of their own (never
// a protocol or worker thread) and only when `model_control` is set (explicit model control);
// otherwise they fail with FAILED_PRECONDITION.
//
// Readiness is what a load balancer's health check reads (/v2/health/ready, ServerReady): it is
// false from StopReady (a shutdown begins) on, while the runner drains, and, when
// `unready_queue_depth` > 0, while more than that many requests wait for a worker, so a balancer
// moves traffic elsewhere before requests fail. (Models load before the ports open, so a replica
// is never reachable while a model it is configured with at start-up still loads.)
//
// Thread-safe. Borrows the registry, runner and pool, which must outlive it; the destructor joins
// the loader thread after the changes already queued have run.
class ServerApi {
 public:
  struct Options {
    bool model_control = false;        // Load/Unload allowed (explicit model control)
    const WorkerPool* pool = nullptr;  // whose queue `unready_queue_depth` watches; may be null
    int unready_queue_depth = 0;       // > 0: not ready while more requests than this wait
  };
  ServerApi(ModelRegistry* registry, const InferenceRunner* runner, Options options);
  ~ServerApi();

  // OK when ready; otherwise Unavailable saying why (shutting down, draining, queue too deep).
  absl::Status CheckReady() const;
  bool ServerReady() const { return CheckReady().ok(); }
  // From now on not ready (a shutdown's first step); requests are still served.
  void StopReady() { stopping_.store(true); }
  // NotFound for an unknown model; otherwise whether the version serves (and the server is not
  // draining).
  absl::StatusOr<bool> ModelReady(absl::string_view name, absl::string_view version) const;
  inference::ServerMetadataResponse ServerMetadata() const;
  // The version's tensors as its config declares them (-1 for variable dims and the batch dim).
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(absl::string_view name,
                                                                 absl::string_view version) const;
  // The complete config the version runs with.
  absl::StatusOr<inference::ModelConfig> ModelConfig(absl::string_view name,
                                                     absl::string_view version) const;
  // Every model's versions and states; with `ready_only`, the ready versions only.
  inference::RepositoryIndexResponse RepositoryIndex(bool ready_only) const;
  // Triton's statistics plus loopserve's per-Loop ones: every ready version (empty name), every
  // ready version of a model (empty version), or one version.
  absl::StatusOr<inference::ModelStatisticsResponse> ModelStatistics(
      absl::string_view name, absl::string_view version) const;

  // Loads (or reloads) / unloads `model` on the loader thread and calls `done` there with the
  // outcome; or returns the error at once without calling `done` (no model control, a
  // repository name, a full loader queue). `rpc` names the request in messages. Load errors
  // start "failed to load '<model>': " (Triton's words). `parameters` (Triton's config override
  // and files) load the model from a private folder (made under the system's temporary folder,
  // 0700; each load's files are removed once loaded) instead of the repository: see
  // LoadParameters.
  using Done = std::function<void(const absl::Status&)>;
  absl::Status Load(absl::string_view rpc, const std::string& repository_name,
                    const std::string& model, LoadParameters parameters, Done done);
  absl::Status Unload(absl::string_view rpc, const std::string& repository_name,
                      const std::string& model, Done done);

  // Triton's system shared-memory extension: the regions clients registered, which both
  // protocols read inputs from and write outputs to.
  SharedMemoryManager* shared_memory() { return &shared_memory_; }
  // Triton's CUDA shared-memory extension: UNIMPLEMENTED (a CPU-only server).
  static absl::Status CudaSharedMemoryUnsupported();

 private:
  absl::Status LoadWithParameters(const std::string& model, const LoadParameters& parameters);
  absl::Status ScheduleChange(absl::string_view rpc, const std::string& repository_name,
                              std::function<absl::Status()> change, Done done);

  ModelRegistry* const registry_;
  const InferenceRunner* const runner_;
  const Options options_;
  std::atomic<bool> stopping_{false};
  // The private folder of the files load requests sent (made on first use; removed at the end)
  // and how many loads wrote there. Loader thread only.
  std::string load_root_;
  int64_t loads_with_files_ = 0;
  SharedMemoryManager shared_memory_;
  WorkerPool loader_;  // one thread for repository loads/unloads
};

}  // namespace loopserve::server
