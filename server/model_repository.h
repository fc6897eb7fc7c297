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
#include "engine/model.h"
#include "proto/model_config.pb.h"
#include "server/metrics.h"

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
  loopserve::ModelConfig config;
  // Handles for this version; null when the registry has no Metrics (tests).
  std::shared_ptr<ModelVersionMetrics> metrics;
};

// Loads a model file; engine::Model::Load in production, replaceable in tests.
using ModelLoader = std::function<absl::StatusOr<std::shared_ptr<const engine::Model>>(
    const std::string& path, const engine::LoadOptions& options)>;

// The models the server serves, by name and version.
//
// LoadAll scans the repository once; a model or version that fails to load is logged with the
// reason and reported not ready while the others are served. Each model's state is replaced as a
// whole under the mutex (ready for hot reload, issue 5): readers copy a shared_ptr and never see a
// half-loaded model. Thread-safe. `Options::metrics`, when set, must outlive the registry.
class ModelRegistry {
 public:
  struct Options {
    std::string root;
    int64_t max_loop_iterations = 0;  // server-wide cap; a model's config.pbtxt overrides it
    ModelLoader loader;               // defaults to engine::Model::Load
    Metrics* metrics = nullptr;       // not owned; may be null
  };

  struct VersionState {
    int64_t version = 0;
    bool ready = false;
    std::string reason;  // why it is not ready
  };
  struct ModelState {
    std::string name;
    std::string reason;                  // a model-level failure (bad config.pbtxt, no versions)
    std::vector<VersionState> versions;  // ascending
  };

  explicit ModelRegistry(Options options);

  // Scans the root and loads every model. Fails only when the root itself cannot be read.
  absl::Status LoadAll();

  // The requested version ("" = the highest ready one). NotFound for an unknown model or version
  // (including version strings that are not versions); Unavailable when it exists but is not ready.
  absl::StatusOr<std::shared_ptr<const LoadedModel>> Get(absl::string_view name,
                                                         absl::string_view version) const;

  // Ready versions of `name`, ascending; NotFound for an unknown model.
  absl::StatusOr<std::vector<int64_t>> ReadyVersions(absl::string_view name) const;

  // Every known model and version with its state, sorted by name.
  std::vector<ModelState> Index() const;

 private:
  struct VersionSlot {
    std::shared_ptr<const LoadedModel> loaded;  // null when not ready
    std::string reason;
  };
  struct ModelEntry {
    std::string reason;
    std::map<int64_t, VersionSlot> versions;
  };

  std::shared_ptr<const ModelEntry> LoadModel(const std::string& name) const;
  std::shared_ptr<const ModelEntry> Find(absl::string_view name) const;

  const Options options_;
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<const ModelEntry>> models_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace loopserve::server
