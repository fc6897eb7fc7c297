#include "server/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/logging.h"
#include "server/model_config.h"

namespace loopserve::server {
namespace fs = std::filesystem;

bool IsValidModelName(absl::string_view name) {
  if (name.empty() || name.size() > 255 || name.front() == '.') return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

std::optional<int64_t> ParseVersion(absl::string_view name) {
  if (name.empty() || name.size() > 19 || name.front() == '0') return std::nullopt;
  int64_t value = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    const int digit = c - '0';
    if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

absl::StatusOr<std::vector<std::string>> ScanModelNames(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("model repository '", root, "' is not a directory"));
  }
  std::vector<std::string> names;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!IsValidModelName(name)) {
      if (name.empty() || name.front() != '.') {
        LogWarning(absl::StrCat("repository: ignoring '", name, "': not a valid model name"));
      }
      continue;
    }
    if (it->is_directory(ec)) names.push_back(name);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot list model repository '", root, "': ", ec.message()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<int64_t> ScanVersions(const std::string& model_dir) {
  std::vector<int64_t> versions;
  std::error_code ec;
  for (fs::directory_iterator it(model_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string name = it->path().filename().string();
    if (std::optional<int64_t> version = ParseVersion(name)) {
      versions.push_back(*version);
    } else {
      LogDebug(absl::StrCat("repository: ignoring '", (fs::path(model_dir) / name).string(),
                            "': not a version number"));
    }
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

std::vector<int64_t> SelectVersions(const std::vector<int64_t>& available,
                                    const loopserve::ModelVersionPolicy& policy) {
  if (policy.has_all()) return available;
  if (policy.has_specific()) {
    std::vector<int64_t> selected;
    for (int64_t v : available) {
      const auto& wanted = policy.specific().versions();
      if (std::find(wanted.begin(), wanted.end(), v) != wanted.end()) selected.push_back(v);
    }
    return selected;
  }
  size_t n = policy.has_latest() ? policy.latest().num_versions() : 1;
  if (n == 0) n = 1;
  n = std::min(n, available.size());
  return std::vector<int64_t>(available.end() - static_cast<std::ptrdiff_t>(n), available.end());
}

absl::StatusOr<std::string> FindModelFile(const std::string& version_dir) {
  std::error_code ec;
  for (const char* file : {"model.onnx", "model.xml"}) {
    const fs::path path = fs::path(version_dir) / file;
    if (fs::is_regular_file(path, ec)) return path.string();
  }
  return absl::NotFoundError(
      absl::StrCat("'", version_dir, "' contains neither model.onnx nor model.xml"));
}

ModelRegistry::ModelRegistry(Options options)
    : options_([&] {
        Options o = std::move(options);
        if (!o.loader) o.loader = &engine::Model::Load;
        return o;
      }()) {}

absl::Status ModelRegistry::LoadAll() {
  absl::StatusOr<std::vector<std::string>> names = ScanModelNames(options_.root);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    std::shared_ptr<const ModelEntry> entry = LoadModel(name);
    absl::MutexLock lock(&mutex_);
    models_[name] = std::move(entry);
  }
  return absl::OkStatus();
}

std::shared_ptr<const ModelRegistry::ModelEntry> ModelRegistry::LoadModel(
    const std::string& name) const {
  auto entry = std::make_shared<ModelEntry>();
  const std::string model_dir = (fs::path(options_.root) / name).string();
  absl::StatusOr<loopserve::ModelConfig> config = ReadModelConfig(model_dir, name);
  if (!config.ok()) {
    entry->reason = std::string(config.status().message());
    LogError(absl::StrCat("model '", name, "' not loaded: ", entry->reason));
    return entry;
  }
  const std::vector<int64_t> selected =
      SelectVersions(ScanVersions(model_dir), config->version_policy());
  if (selected.empty()) {
    entry->reason =
        absl::StrCat("model '", name, "': no version folder matches the version policy");
    LogError(absl::StrCat("model '", name, "' not loaded: ", entry->reason));
    return entry;
  }
  for (int64_t version : selected) {
    VersionSlot& slot = entry->versions[version];
    const std::string label = absl::StrCat("model '", name, "' v", version);
    const std::string version_dir = (fs::path(model_dir) / absl::StrCat(version)).string();
    absl::StatusOr<std::string> file = FindModelFile(version_dir);
    absl::StatusOr<std::shared_ptr<const engine::Model>> model =
        file.ok() ? options_.loader(*file, engine::LoadOptions{label}) : file.status();
    if (!model.ok()) {
      slot.reason = absl::StrCat(label, ": ", model.status().ToString());
      LogError(absl::StrCat("not loaded: ", slot.reason));
      if (options_.metrics != nullptr) options_.metrics->SetModelReady(name, version, false);
      continue;
    }
    auto loaded = std::make_shared<LoadedModel>();
    loaded->name = name;
    loaded->version = version;
    loaded->version_string = absl::StrCat(version);
    loaded->platform = absl::EndsWith(*file, ".xml") ? "openvino" : "onnx";
    loaded->path = *file;
    loaded->model = *std::move(model);
    loaded->config = *config;
    loaded->max_loop_iterations = config->max_loop_iterations() > 0 ? config->max_loop_iterations()
                                                                    : options_.max_loop_iterations;
    if (options_.metrics != nullptr) {
      loaded->metrics =
          options_.metrics->ForModelVersion(name, version, loaded->model->loop_names());
      options_.metrics->SetModelReady(name, version, true);
    }
    LogInfo(absl::StrCat("loaded ", label, " from '", *file, "' (", loaded->model->inputs().size(),
                         " inputs, ", loaded->model->outputs().size(), " outputs, ",
                         loaded->model->loop_names().size(), " loops)"));
    slot.loaded = std::move(loaded);
  }
  return entry;
}

std::shared_ptr<const ModelRegistry::ModelEntry> ModelRegistry::Find(absl::string_view name) const {
  absl::MutexLock lock(&mutex_);
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : it->second;
}

absl::StatusOr<std::shared_ptr<const LoadedModel>> ModelRegistry::Get(
    absl::string_view name, absl::string_view version) const {
  std::shared_ptr<const ModelEntry> entry = Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' not found"));
  }
  if (version.empty()) {
    for (auto it = entry->versions.rbegin(); it != entry->versions.rend(); ++it) {
      if (it->second.loaded != nullptr) return it->second.loaded;
    }
    std::vector<std::string> reasons;
    if (!entry->reason.empty()) reasons.push_back(entry->reason);
    for (const auto& [v, slot] : entry->versions) reasons.push_back(slot.reason);
    return absl::UnavailableError(
        absl::StrCat("model '", name, "' has no ready version: ", absl::StrJoin(reasons, "; ")));
  }
  const std::optional<int64_t> number = ParseVersion(version);
  auto it = number ? entry->versions.find(*number) : entry->versions.end();
  if (it == entry->versions.end()) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' has no version '", version, "'"));
  }
  if (it->second.loaded == nullptr) {
    return absl::UnavailableError(absl::StrCat("not ready: ", it->second.reason));
  }
  return it->second.loaded;
}

absl::StatusOr<std::vector<int64_t>> ModelRegistry::ReadyVersions(absl::string_view name) const {
  std::shared_ptr<const ModelEntry> entry = Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' not found"));
  }
  std::vector<int64_t> versions;
  for (const auto& [v, slot] : entry->versions) {
    if (slot.loaded != nullptr) versions.push_back(v);
  }
  return versions;
}

std::vector<ModelRegistry::ModelState> ModelRegistry::Index() const {
  std::vector<std::pair<std::string, std::shared_ptr<const ModelEntry>>> entries;
  {
    absl::MutexLock lock(&mutex_);
    entries.assign(models_.begin(), models_.end());
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ModelState> index;
  for (const auto& [name, entry] : entries) {
    ModelState state{name, entry->reason, {}};
    for (const auto& [v, slot] : entry->versions) {
      state.versions.push_back(VersionState{v, slot.loaded != nullptr, slot.reason});
    }
    index.push_back(std::move(state));
  }
  return index;
}

}  // namespace loopserve::server
