#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "proto/model_config.pb.h"
#include "server/observability/metrics.h"
#include "server/repository/model_config.h"
#include "server/repository/ovms_config.h"
#include "server/repository/repo_file.h"
#include "server/scheduling/scheduler.h"
#include "server/scheduling/worker_pool.h"

namespace loopserve::server {

// ---- Repository layout: <root>/<model>/[config.pbtxt]/<version>/model.{onnx,xml} ----
// (or, with an OpenVINO Model Server config.json, the model folders it lists; see ovms_config.h)

// IsValidModelName: server/repository/repo_file.h.

// A version folder name: a positive decimal integer without sign or leading zeros that fits in
// int64 ("1", "42"). std::nullopt for anything else ("0", "01", "-1", "v1", "1.0").
std::optional<int64_t> ParseVersion(absl::string_view name);

// Valid model folder names under `root`, sorted. Other entries (files, hidden or oddly named
// folders) are skipped. NotFound when `root` is not a directory.
absl::StatusOr<std::vector<std::string>> ScanModelNames(const std::string& root);

// Version folders under `model_dir`, ascending; folders whose names are not versions are ignored.
std::vector<int64_t> ScanVersions(const std::string& model_dir);

// The versions a policy serves out of `available` (ascending): latest N (default N = 1), all, or
// the listed ones that exist.
std::vector<int64_t> SelectVersions(const std::vector<int64_t>& available,
                                    const inference::ModelVersionPolicy& policy);

// ---- Loaded models and the registry ----

// One loaded model version: immutable, shared as shared_ptr<const LoadedModel>. A request pins it
// for its whole duration, so a later reload or unload never pulls a model out from under a run.
struct LoadedModel {
  std::string name;
  int64_t version = 0;
  std::string version_string;  // "3"
  std::string platform;        // the config's: "onnxruntime_onnx" or "openvino"
  std::string path;            // the model file
  std::shared_ptr<const engine::Model> model;
  int64_t max_loop_iterations = 0;       // effective cap for RunOptions; 0 = unlimited
  int64_t max_output_bytes = 0;          // effective output cap; 0 = unlimited
  int64_t max_request_memory_bytes = 0;  // effective per-request memory budget; 0 = unlimited
  engine::LoopThreads loop_threads = engine::LoopThreads::kAdaptive;  // effective, for RunOptions
  // The precision `model` was compiled with (the config's parameter, else the server's flag).
  engine::LoadOptions::Precision precision = engine::LoadOptions::Precision::kFp32;
  // The complete (auto-completed, validated) config this version runs with; the ModelConfig RPC
  // answers it.
  inference::ModelConfig config;
  // The config as the request path applies it (declared dims, reshapes, optional inputs).
  ModelIo io;
  // Statistics and metric handles of this version; never null. Kept across reloads of the same
  // version (a config change re-wraps the same engine model).
  std::shared_ptr<ModelVersionMetrics> metrics;
  // Caps the requests of this version running at once (the instance count); null = no cap.
  std::shared_ptr<TaskGroup> instances;
  // How its requests get to run (server/scheduling/scheduler.h, MakeScheduler): the
  // SequenceScheduler, IterationBatcher, DynamicBatcher or DirectScheduler its config asks for;
  // never null. Mutable through the const LoadedModel (its queue and timing state are the
  // scheduler's own, thread-safe).
  std::shared_ptr<Scheduler> scheduler;
};

// Loads a model file; engine::Model::Load in production, replaceable in tests.
using ModelLoader = std::function<absl::StatusOr<std::shared_ptr<const engine::Model>>(
    const std::string& path, const engine::LoadOptions& options)>;

// The models the server serves, by name and version, and their lifecycle.
//
// The models are the folders of `Options::root` or, with `Options::config_path`, the entries of
// an OpenVINO Model Server config.json (re-read on every Poll; a file that fails to parse keeps
// the models as they are). LoadAll loads them once; Poll rescans (new models and versions are
// loaded, changed ones reloaded, removed ones unloaded); Load and Unload act on one model (Triton's
// explicit model control). A version is reloaded only when its files (names, sizes, modification
// times) or the model's config changed, so polling an unchanged repository costs a directory
// walk. Loads never run on the request path: a poll's loads (one task per model, its versions in
// order) run on the registry's loader pool (Options::loader_threads; without one, on the
// caller's thread), so one model's long load or warm-up never holds up the others': StartPoll
// returns once they are started, and a later poll leaves a model whose load still runs alone
// (it looks again once that load is done). Load (a repository RPC) runs on the caller's thread.
//
// Loading a version: find the model file the config names (FindModelFile), load it, complete and
// validate the config against it (CompleteModelConfig; a mismatch is a load error naming the
// tensor and field), then run the config's model_warmup samples; only then is the version
// installed and reported ready. A config change re-validates and re-warms the loaded engine model
// without reading its files again. Settings a config gives that loopserve ignores are logged once
// per config change.
//
// Swaps are atomic: a model's state is replaced as a whole under the mutex, and readers copy a
// shared_ptr, so they never see a half-loaded model, and a request keeps the LoadedModel it pinned
// until it finishes. A version that fails to load is reported (Index, Get, logs, model_ready 0)
// while the previous state keeps serving: a reload failure keeps the loaded version, and when a new
// version fails the versions it was to replace stay loaded ("retained") until it loads.
//
// Thread-safe: lifecycle operations (listing, starting loads, Load, Unload) are serialised among
// themselves (load_mutex_) and never hold the read mutex while loading; loads of different models
// run in parallel on the loader pool, one load per model at a time. `Options::metrics`, when set,
// must outlive the registry.
class ModelRegistry {
 public:
  struct Options {
    std::string root;
    int64_t max_loop_iterations = 0;  // server-wide cap; a model's config.pbtxt overrides it
    ModelLoader loader;               // defaults to engine::Model::Load
    Metrics* metrics = nullptr;       // not owned; may be null
    int64_t max_output_bytes = 0;     // server-wide cap; a model's config.pbtxt overrides it
    // Server-wide per-request memory budget (also the cap on a model's constants at load); a
    // model's config.pbtxt overrides it. 0 = unlimited.
    int64_t max_request_memory_bytes = 0;
    int64_t max_model_file_bytes = 0;  // engine::LoadOptions::max_file_bytes
    // Server-wide RunOptions::loop_threads; a model's config.pbtxt overrides it.
    engine::LoopThreads loop_threads = engine::LoopThreads::kAdaptive;
    // Server-wide engine::LoadOptions::precision; a model's config.pbtxt overrides it (a change
    // of the effective precision reloads the version's files). `force_precision`: bf16 loads on
    // a CPU without native bf16 too.
    engine::LoadOptions::Precision precision = engine::LoadOptions::Precision::kFp32;
    bool force_precision = false;
    // An OpenVINO Model Server config.json; when set, its models are served and `root` is unused.
    std::string config_path = "";
    bool auto_complete = true;       // false: --disable_auto_complete_config
    int default_instance_count = 1;  // instance count of a config that gives none (--workers)
    absl::Duration warmup_run_timeout = absl::Seconds(60);  // deadline of one warm-up run
    int intra_op_threads = 0;  // of warm-up runs, as the workers have (0 = the thread's own)
    // Set (from any thread, or a signal handler) to stop loading: a warm-up run in progress is
    // cancelled, no further version starts loading, and LoadAll / Poll / Load return Cancelled
    // without installing what they had built (what serves keeps serving). A model file being
    // read and compiled (engine::Model::Load) is finished first. Not owned; may be null.
    const std::atomic<bool>* stop = nullptr;
    // Threads that load models for Poll / StartPoll / LoadAll, one model each at a time; 0: the
    // caller's thread loads them one after the other.
    int loader_threads = 0;
  };

  struct VersionState {
    int64_t version = 0;
    bool ready = false;
    std::string reason;  // why it is not ready (or, when ready, why it is still served)
  };
  struct ModelState {
    std::string name;
    std::string reason;                  // a model-level failure (bad config.pbtxt, no versions)
    std::vector<VersionState> versions;  // ascending
  };

  explicit ModelRegistry(Options options);
  // Stops the loader pool after the loads queued (set Options::stop first to cut them short).
  ~ModelRegistry();

  // Scans the root (or reads config.json) and loads every model. Fails only when the root cannot
  // be read or config.json is missing or invalid, or (Cancelled) when Options::stop is set.
  absl::Status LoadAll();

  // Rescans the root (or re-reads config.json): loads new models and versions, reloads changed
  // ones, unloads what was removed from disk (or from config.json) or left the version policy.
  // Fails only when the root cannot be read or config.json is missing or invalid, and then
  // changes nothing. Waits for the loads it starts (in parallel on the loader pool).
  absl::Status Poll();

  // As Poll, but returns once the loads are started on the loader pool; each installs its model
  // when done. A model still loading from an earlier poll is skipped (and not unloaded). The
  // server's poller uses it, so a model with an hour of warm-up never delays the others' updates.
  absl::Status StartPoll();

  // Loads or reloads `name` from disk (retrying versions that failed before). InvalidArgument for
  // an invalid name, NotFound when the repository (or config.json) has no such model; otherwise
  // the first load error (the previous versions keep serving), or OK when every selected version
  // is ready.
  absl::Status Load(absl::string_view name) { return Load(name, nullptr); }

  // A load request's own config and files (Triton's load parameters): `config_text` (a
  // config.pbtxt's text) replaces the model folder's config.pbtxt; a non-empty `dir` (a private
  // folder the caller wrote the request's files to, outside the repository) replaces the model
  // folder. The override holds until the next load of the model.
  struct LoadOverride {
    std::optional<std::string> config_text;
    std::string dir;
  };
  // Load with `load_override` (may be null); with a `dir`, the model need not be in the
  // repository.
  absl::Status Load(absl::string_view name, const LoadOverride* load_override);

  // Unloads every version of `name`; it stays in Index as unloaded. Requests in flight finish on
  // the version they pinned. NotFound when the model is neither loaded nor in the repository.
  absl::Status Unload(absl::string_view name);

  // The requested version ("" = the highest ready one). NotFound for an unknown model or version
  // (including version strings that are not versions); Unavailable when it exists but is not ready.
  absl::StatusOr<std::shared_ptr<const LoadedModel>> Get(absl::string_view name,
                                                         absl::string_view version) const;

  // Ready versions of `name`, ascending; NotFound for an unknown model.
  absl::StatusOr<std::vector<int64_t>> ReadyVersions(absl::string_view name) const;

  // Every ready version of every model, sorted by name then version.
  std::vector<std::shared_ptr<const LoadedModel>> ReadyModels() const;

  // Every known model and version with its state, sorted by name; with a repository root, also
  // the models of the root never loaded (reason "not loaded", no versions), as Triton lists them.
  std::vector<ModelState> Index() const;

 private:
  struct VersionSlot {
    std::shared_ptr<const LoadedModel> loaded;  // null when not ready
    std::string reason;
    std::string fingerprint;  // of the version folder as last tried (loaded or failed)
    std::string
        loaded_fingerprint;  // of the files `loaded` came from (older after a failed reload)
    std::string config_key;  // ModelEntry::config_key that `loaded` runs with
    // The config_key of the last attempt that failed (a load, or a reconfiguration of `loaded`):
    // the same files under the same config are not tried again until asked (Load).
    std::string failed_config_key;
  };
  struct ModelEntry {
    std::string reason;
    std::map<int64_t, VersionSlot> versions;
    std::string config_key;  // the model folder and the serialized config the versions use
  };
  // Where a model comes from: a repository folder, or a config.json entry.
  struct ModelSource {
    std::string name;
    std::string dir;  // holds the numbered version folders (and config.pbtxt, if any)
    const OvmsModelEntry* ovms = nullptr;    // the config.json entry; null for a repository folder
    std::optional<std::string> config_text;  // a load request's config (LoadOverride)
    bool private_dir = false;                // `dir` is a load request's files (LoadOverride)
  };
  // The models to serve now, sorted by name (`ovms` points into `*ovms_config`). Reading
  // config.json logs its ignored settings once per change.
  absl::StatusOr<std::vector<ModelSource>> ListModels(std::unique_ptr<OvmsConfig>* ovms_config)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mutex_);

  // Builds the new state of the model `source` names, reusing what `previous` (may be null)
  // loaded from unchanged files. `retry_failed` reloads versions that failed with the same files.
  // Returns the first load error through `error` (OK when none).
  std::shared_ptr<const ModelEntry> BuildEntry(const ModelSource& source,
                                               const ModelEntry* previous, bool retry_failed,
                                               absl::Status* error) const;
  // BuildEntry's steps. The model's config (config.pbtxt, the config.json entry over it), its
  // folder checked.
  absl::StatusOr<ParsedModelConfig> ReadSourceConfig(const ModelSource& source) const;
  // What became of one version: it serves (loaded, kept, or its previous load kept), it failed
  // with nothing serving, or the registry is stopping (the entry is discarded).
  enum class VersionOutcome { kServing, kFailed, kStopped };
  // One selected version into `entry.versions[version]`: kept as it was when its files and
  // config did not change (or failed the same way before, unless `retry_failed`), reconfigured
  // when only the config changed, loaded otherwise. The first error goes to `*error`.
  VersionOutcome BuildVersion(const ModelSource& source, const ParsedModelConfig& parsed,
                              int64_t version, const VersionSlot* old, bool retry_failed,
                              ModelEntry& entry, absl::Status* error) const;
  // The serving load of `slot` under a new config (Prepare again); a rejected config keeps the
  // previous one serving.
  VersionOutcome Reconfigure(const ModelSource& source, const ParsedModelConfig& parsed,
                             int64_t version, const std::string& config_key, VersionSlot& slot,
                             absl::Status* error) const;
  // Loads the version's files (FindSafeModelFile, the loader, Prepare); a failed reload keeps
  // `old`'s load serving.
  VersionOutcome Load(const ModelSource& source, const ParsedModelConfig& parsed, int64_t version,
                      const std::string& version_dir, const std::string& fingerprint,
                      const VersionSlot* old, const std::string& config_key, VersionSlot& slot,
                      absl::Status* error) const;
  // The model file the config names in `version_dir` (FindModelFile), and an OpenVINO IR's
  // weights beside it, checked as repository files.
  absl::StatusOr<std::string> FindSafeModelFile(const ModelSource& source,
                                                const std::string& version_dir,
                                                const ParsedModelConfig& parsed) const;
  // After a new version failed: `previous`'s loaded versions no longer selected stay (while
  // their folders exist) until it loads.
  void RetainVersions(const ModelSource& source, const ModelEntry& previous,
                      ModelEntry& entry) const;
  // Completes and validates `parsed` against `model`, builds the LoadedModel and runs the
  // warm-up. `metrics` null: new handles.
  absl::StatusOr<std::shared_ptr<const LoadedModel>> Prepare(
      const ModelSource& source, const ParsedModelConfig& parsed, int64_t version,
      const std::string& file, std::shared_ptr<const engine::Model> model,
      std::shared_ptr<ModelVersionMetrics> metrics) const;
  // Installs `entry` for `name` (null removes it) and updates model_ready / logs for versions that
  // are no longer served. With `epoch` (a load on the pool): only while the model's epoch is
  // still that (no unload, removal or requested load came since the load started).
  void Install(const std::string& name, std::shared_ptr<const ModelEntry> entry,
               absl::string_view why_unloaded, std::optional<uint64_t> epoch = std::nullopt);
  // The loads a Poll waits for.
  struct PendingLoads {
    absl::Mutex mutex;
    absl::CondVar done;  // signalled when `left` reaches 0
    int left ABSL_GUARDED_BY(mutex) = 0;
  };
  absl::Status PollModels(bool wait);
  // Loads `source` on the loader pool (or here) unless it is loading already; counted in
  // `pending` until installed. `ovms_config` holds what `source` points into.
  void StartLoad(const ModelSource& source, std::shared_ptr<const OvmsConfig> ovms_config,
                 std::shared_ptr<PendingLoads> pending, bool wait)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mutex_);
  static constexpr int kMaxQueuedLoads = 1 << 20;
  std::shared_ptr<const ModelEntry> Find(absl::string_view name) const;
  bool Stopping() const { return options_.stop != nullptr && options_.stop->load(); }

  const Options options_;
  absl::Mutex load_mutex_;  // serialises LoadAll, Poll, Load and Unload
  std::string ovms_config_text_ ABSL_GUARDED_BY(load_mutex_);  // the last config.json read
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<const ModelEntry>> models_
      ABSL_GUARDED_BY(mutex_);
  // Models whose load runs on the pool; per model, a count of unloads, removals and requested
  // loads (a load on the pool installs its result only if it did not change meanwhile).
  absl::flat_hash_set<std::string> loading_ ABSL_GUARDED_BY(mutex_);
  absl::CondVar load_done_;  // signalled when a model leaves `loading_`
  absl::flat_hash_map<std::string, uint64_t> epochs_ ABSL_GUARDED_BY(mutex_);
  // Last: destroyed (its threads joined) first, while what its loads use still exists.
  std::unique_ptr<WorkerPool> loader_pool_;
};

}  // namespace loopserve::server
