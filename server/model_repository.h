#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "proto/model_config.pb.h"
#include "server/metrics.h"
#include "server/worker_pool.h"

namespace loopserve::server {

// ---- Repository layout: <root>/<model>/[config.pbtxt]/<version>/model.{onnx,xml} ----

// A model name is one path component: non-empty, at most 255 bytes, not starting with '.', and
// made of letters, digits, '_', '-' and '.' only. So a name can never leave the repository root.
bool IsValidModelName(absl::string_view name);

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
                                    const loopserve::ModelVersionPolicy& policy);

// `<version_dir>/model.onnx`, else `<version_dir>/model.xml`; NotFound naming both otherwise.
absl::StatusOr<std::string> FindModelFile(const std::string& version_dir);

// ---- Loaded models and the registry ----

// One loaded model version: immutable, shared as shared_ptr<const LoadedModel>. A request pins it
// for its whole duration, so a later reload or unload never pulls a model out from under a run.
struct LoadedModel {
  std::string name;
  int64_t version = 0;
  std::string version_string;  // "3"
  std::string platform;        // "onnx" or "openvino"
  std::string path;            // the model file
  std::shared_ptr<const engine::Model> model;
  int64_t max_loop_iterations = 0;  // effective cap for RunOptions; 0 = unlimited
  int64_t max_output_bytes = 0;     // effective output cap; 0 = unlimited
  loopserve::ModelConfig config;
  // Statistics and metric handles of this version; never null. Kept across reloads of the same
  // version (a config change re-wraps the same engine model).
  std::shared_ptr<ModelVersionMetrics> metrics;
  // Caps the requests of this version running at once (config instance_count); null = no cap.
  std::shared_ptr<TaskGroup> instances;
};

// Loads a model file; engine::Model::Load in production, replaceable in tests.
using ModelLoader = std::function<absl::StatusOr<std::shared_ptr<const engine::Model>>(
    const std::string& path, const engine::LoadOptions& options)>;

// The models the server serves, by name and version, and their lifecycle.
//
// LoadAll scans the repository once; Poll rescans it (new models and versions are loaded, changed
// ones reloaded, removed ones unloaded); Load and Unload act on one model (Triton's explicit model
// control). A version is reloaded only when its files (names, sizes, modification times) or the
// model's config.pbtxt changed, so polling an unchanged repository costs a directory walk. Loads
// run on the caller's thread (the server's poller or a repository RPC), never on the request path.
//
// Swaps are atomic: a model's state is replaced as a whole under the mutex, and readers copy a
// shared_ptr, so they never see a half-loaded model, and a request keeps the LoadedModel it pinned
// until it finishes. A version that fails to load is reported (Index, Get, logs, model_ready 0)
// while the previous state keeps serving: a reload failure keeps the loaded version, and when a new
// version fails the versions it was to replace stay loaded ("retained") until it loads.
//
// Thread-safe: lifecycle operations are serialised among themselves (load_mutex_) and never hold
// the read mutex while loading. `Options::metrics`, when set, must outlive the registry.
class ModelRegistry {
 public:
  struct Options {
    std::string root;
    int64_t max_loop_iterations = 0;  // server-wide cap; a model's config.pbtxt overrides it
    ModelLoader loader;               // defaults to engine::Model::Load
    Metrics* metrics = nullptr;       // not owned; may be null
    int64_t max_output_bytes = 0;     // server-wide cap; a model's config.pbtxt overrides it
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

  // Scans the root and loads every model. Fails only when the root itself cannot be read.
  absl::Status LoadAll();

  // Rescans the root: loads new models and versions, reloads changed ones, unloads what was
  // removed from disk or left the version policy. Fails only when the root cannot be read.
  absl::Status Poll();

  // Loads or reloads `name` from disk (retrying versions that failed before). InvalidArgument for
  // an invalid name, NotFound when the repository has no such folder; otherwise the first load
  // error (the previous versions keep serving), or OK when every selected version is ready.
  absl::Status Load(absl::string_view name);

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

  // Every known model and version with its state, sorted by name.
  std::vector<ModelState> Index() const;

 private:
  struct VersionSlot {
    std::shared_ptr<const LoadedModel> loaded;  // null when not ready
    std::string reason;
    std::string fingerprint;  // of the version folder this slot was loaded (or failed) from
  };
  struct ModelEntry {
    std::string reason;
    std::map<int64_t, VersionSlot> versions;
    std::string config_key;  // the serialized config the loaded versions use
  };

  // Builds the new state of `name` from disk, reusing what `previous` (may be null) loaded from
  // unchanged files. `retry_failed` reloads versions that failed with the same files. Returns the
  // first load error through `error` (OK when none).
  std::shared_ptr<const ModelEntry> BuildEntry(const std::string& name, const ModelEntry* previous,
                                               bool retry_failed, absl::Status* error) const;
  // Installs `entry` for `name` (null removes it) and updates model_ready / logs for versions that
  // are no longer served.
  void Install(const std::string& name, std::shared_ptr<const ModelEntry> entry,
               absl::string_view why_unloaded) ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mutex_);
  std::shared_ptr<const ModelEntry> Find(absl::string_view name) const;

  const Options options_;
  absl::Mutex load_mutex_;  // serialises LoadAll, Poll, Load and Unload
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<const ModelEntry>> models_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace loopserve::server
