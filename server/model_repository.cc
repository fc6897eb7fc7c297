#include "server/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "engine/base/status_macros.h"
#include "server/logging.h"
#include "server/model_config.h"
#include "server/status_util.h"

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
        LogDebug(absl::StrCat("repository: ignoring ", QuoteUntrusted(name),
                              ": not a valid model name"));
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
  return absl::NotFoundError(absl::StrCat("version folder ",
                                          fs::path(version_dir).filename().string(),
                                          " contains neither model.onnx nor model.xml"));
}

namespace {

// "name:size:mtime;" for every regular file under `dir`, sorted: changes when a file is added,
// removed, rewritten or touched. Empty when the folder cannot be read.
std::string Fingerprint(const std::string& dir) {
  std::vector<std::string> parts;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code file_ec;
    if (!it->is_regular_file(file_ec)) continue;
    const auto size = it->file_size(file_ec);
    const auto mtime = it->last_write_time(file_ec).time_since_epoch().count();
    if (file_ec) continue;
    parts.push_back(absl::StrCat(fs::relative(it->path(), dir, file_ec).string(), ":", size, ":",
                                 static_cast<int64_t>(mtime)));
  }
  std::sort(parts.begin(), parts.end());
  return absl::StrJoin(parts, ";");
}

}  // namespace

ModelRegistry::ModelRegistry(Options options)
    : options_([&] {
        Options o = std::move(options);
        if (!o.loader) o.loader = &engine::Model::Load;
        return o;
      }()) {}

absl::Status ModelRegistry::LoadAll() { return Poll(); }

absl::Status ModelRegistry::Poll() {
  absl::MutexLock load_lock(&load_mutex_);
  absl::StatusOr<std::vector<std::string>> names = ScanModelNames(options_.root);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    std::shared_ptr<const ModelEntry> previous = Find(name);
    absl::Status error;
    Install(name, BuildEntry(name, previous.get(), /*retry_failed=*/false, &error), "");
  }
  std::vector<std::string> removed;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [name, entry] : models_) {
      if (!std::binary_search(names->begin(), names->end(), name)) removed.push_back(name);
    }
  }
  for (const std::string& name : removed) {
    Install(name, nullptr, "its folder was removed from the repository");
  }
  return absl::OkStatus();
}

absl::Status ModelRegistry::Load(absl::string_view name) {
  if (!IsValidModelName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid model name ", QuoteUntrusted(name),
                     " (a model name is one folder name of the repository)"));
  }
  const std::string model(name);
  std::error_code ec;
  if (!fs::is_directory(fs::path(options_.root) / model, ec)) {
    return absl::NotFoundError(absl::StrCat("model '", model, "' is not in the model repository"));
  }
  absl::MutexLock load_lock(&load_mutex_);
  std::shared_ptr<const ModelEntry> previous = Find(model);
  absl::Status error;
  Install(model, BuildEntry(model, previous.get(), /*retry_failed=*/true, &error), "");
  return error;
}

absl::Status ModelRegistry::Unload(absl::string_view name) {
  absl::MutexLock load_lock(&load_mutex_);
  const std::string model(name);
  std::error_code ec;
  if (Find(model) == nullptr &&
      !(IsValidModelName(name) && fs::is_directory(fs::path(options_.root) / model, ec))) {
    return absl::NotFoundError(absl::StrCat("model ", QuoteUntrusted(name), " not found"));
  }
  auto entry = std::make_shared<ModelEntry>();
  entry->reason = "unloaded";
  Install(model, std::move(entry), "unloaded by request");
  return absl::OkStatus();
}

std::shared_ptr<const ModelRegistry::ModelEntry> ModelRegistry::BuildEntry(
    const std::string& name, const ModelEntry* previous, bool retry_failed,
    absl::Status* error) const {
  *error = absl::OkStatus();
  auto entry = std::make_shared<ModelEntry>();
  const std::string model_dir = (fs::path(options_.root) / name).string();
  auto has_loaded = [](const ModelEntry* e) {
    if (e == nullptr) return false;
    for (const auto& [v, slot] : e->versions) {
      if (slot.loaded != nullptr) return true;
    }
    return false;
  };

  absl::StatusOr<loopserve::ModelConfig> config = ReadModelConfig(model_dir, name);
  if (!config.ok()) {
    *error = config.status();
    const std::string reason(config.status().message());
    // A broken config.pbtxt must not take down versions that serve: keep them until it is fixed.
    if (has_loaded(previous)) *entry = *previous;
    if (previous == nullptr || previous->reason != reason) {
      LogError(absl::StrCat("model '", name, "' not loaded: ", reason,
                            has_loaded(previous) ? " (the loaded versions keep serving)" : ""));
    }
    entry->reason = reason;
    return entry;
  }
  entry->config_key = config->SerializeAsString();
  const bool config_changed = previous == nullptr || previous->config_key != entry->config_key;
  const std::vector<int64_t> selected =
      SelectVersions(ScanVersions(model_dir), config->version_policy());
  if (selected.empty()) {
    entry->reason =
        absl::StrCat("model '", name, "': no version folder matches the version policy");
    *error = absl::NotFoundError(entry->reason);
    if (previous == nullptr || previous->reason != entry->reason) {
      LogError(absl::StrCat("model '", name, "' not loaded: ", entry->reason));
    }
    return entry;
  }

  const int64_t memory_budget = config->max_request_memory_bytes() > 0
                                    ? config->max_request_memory_bytes()
                                    : options_.max_request_memory_bytes;
  engine::LoadOptions load_options;
  load_options.max_file_bytes = options_.max_model_file_bytes;
  load_options.max_memory_bytes = memory_budget;

  // Wraps an engine model into a LoadedModel with this config's settings.
  auto wrap = [&](int64_t version, const std::string& file,
                  std::shared_ptr<const engine::Model> model,
                  std::shared_ptr<ModelVersionMetrics> metrics) {
    auto loaded = std::make_shared<LoadedModel>();
    loaded->name = name;
    loaded->version = version;
    loaded->version_string = absl::StrCat(version);
    loaded->platform = absl::EndsWith(file, ".xml") ? "openvino" : "onnx";
    loaded->path = file;
    loaded->config = *config;
    loaded->max_loop_iterations = config->max_loop_iterations() > 0 ? config->max_loop_iterations()
                                                                    : options_.max_loop_iterations;
    loaded->max_output_bytes =
        config->max_output_bytes() > 0 ? config->max_output_bytes() : options_.max_output_bytes;
    loaded->max_request_memory_bytes = memory_budget;
    if (config->instance_count() > 0) {
      loaded->instances = std::make_shared<TaskGroup>(static_cast<int>(
          std::min<uint32_t>(config->instance_count(), std::numeric_limits<int>::max())));
    }
    if (metrics == nullptr) {
      metrics = options_.metrics != nullptr
                    ? options_.metrics->ForModelVersion(name, version, model->loop_names())
                    : ModelVersionMetrics::StatisticsOnly(model->loop_names());
    }
    loaded->metrics = std::move(metrics);
    loaded->model = std::move(model);
    return std::shared_ptr<const LoadedModel>(std::move(loaded));
  };

  bool any_failed = false;
  for (int64_t version : selected) {
    const std::string label = absl::StrCat("model '", name, "' v", version);
    const std::string version_dir = (fs::path(model_dir) / absl::StrCat(version)).string();
    const std::string fingerprint = Fingerprint(version_dir);
    const VersionSlot* old = nullptr;
    if (previous != nullptr) {
      auto it = previous->versions.find(version);
      if (it != previous->versions.end()) old = &it->second;
    }
    VersionSlot& slot = entry->versions[version];
    if (old != nullptr && old->fingerprint == fingerprint) {
      if (old->loaded != nullptr) {
        slot = *old;
        slot.reason.clear();
        if (config_changed) {
          slot.loaded = wrap(version, old->loaded->path, old->loaded->model, old->loaded->metrics);
          LogInfo(absl::StrCat("reconfigured ", label, " (config.pbtxt changed)"));
        }
        continue;
      }
      if (!retry_failed && !config_changed) {
        slot = *old;  // same files, same config: it would fail the same way
        any_failed = true;
        continue;
      }
    }

    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> file = FindModelFile(version_dir);
    load_options.name = label;
    absl::StatusOr<std::shared_ptr<const engine::Model>> model =
        file.ok() ? options_.loader(*file, load_options) : file.status();
    const absl::Duration took = absl::Now() - start;
    slot.fingerprint = fingerprint;
    if (options_.metrics != nullptr) {
      options_.metrics->RecordModelLoad(name, version, model.ok(), took);
    }
    if (!model.ok()) {
      const std::string reason = absl::StrCat(label, ": ", model.status().ToString());
      if (*error == absl::OkStatus()) *error = Annotate(model.status(), absl::StrCat(label, ": "));
      if (old != nullptr && old->loaded != nullptr) {
        // A reload of a serving version failed: the files it was loaded from keep serving.
        slot.loaded = old->loaded;
        slot.reason = absl::StrCat("reload failed, serving the previous load: ", reason);
        LogError(absl::StrCat("reload of ", label, " failed (the previous load keeps serving): ",
                              model.status().ToString()));
      } else {
        slot.reason = reason;
        any_failed = true;
        LogError(absl::StrCat("failed to load ", label, ": ", model.status().ToString()));
      }
      continue;
    }
    slot.loaded = wrap(version, *file, *std::move(model), nullptr);
    LogInfo(absl::StrCat(old != nullptr ? "reloaded " : "loaded ", label, " from '", *file, "' in ",
                         absl::FormatDuration(absl::Trunc(took, absl::Microseconds(100))), " (",
                         slot.loaded->model->inputs().size(), " inputs, ",
                         slot.loaded->model->outputs().size(), " outputs, ",
                         slot.loaded->model->loop_names().size(), " loops)"));
  }

  // A new version that failed must not leave the model without the versions it was to replace:
  // those stay loaded (while their folders exist) until it loads.
  if (any_failed && previous != nullptr) {
    for (const auto& [version, old] : previous->versions) {
      if (old.loaded == nullptr || entry->versions.count(version) > 0) continue;
      std::error_code ec;
      if (!fs::is_directory(fs::path(model_dir) / absl::StrCat(version), ec)) continue;
      VersionSlot& slot = entry->versions[version];
      slot = old;
      slot.reason = "retained: a newer version selected by the version policy failed to load";
      if (old.reason != slot.reason) {
        LogWarning(absl::StrCat("model '", name, "' v", version,
                                " keeps serving: a newer version failed to load"));
      }
    }
  }
  return entry;
}

void ModelRegistry::Install(const std::string& name, std::shared_ptr<const ModelEntry> entry,
                            absl::string_view why_unloaded) {
  std::shared_ptr<const ModelEntry> old;
  {
    absl::MutexLock lock(&mutex_);
    auto it = models_.find(name);
    if (it != models_.end()) old = it->second;
    if (entry != nullptr) {
      models_[name] = entry;
    } else if (it != models_.end()) {
      models_.erase(it);
    }
  }
  if (old != nullptr) {
    for (const auto& [version, slot] : old->versions) {
      if (slot.loaded == nullptr) continue;
      bool still_served = false;
      if (entry != nullptr) {
        auto it = entry->versions.find(version);
        still_served = it != entry->versions.end() && it->second.loaded != nullptr;
      }
      if (still_served) continue;
      LogInfo(absl::StrCat("unloaded model '", name, "' v", version,
                           why_unloaded.empty() ? "" : absl::StrCat(" (", why_unloaded, ")")));
      if (options_.metrics != nullptr) options_.metrics->SetModelReady(name, version, false);
    }
  }
  if (entry != nullptr && options_.metrics != nullptr) {
    for (const auto& [version, slot] : entry->versions) {
      options_.metrics->SetModelReady(name, version, slot.loaded != nullptr);
    }
  }
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
    return absl::NotFoundError(absl::StrCat("model ", QuoteUntrusted(name), " not found"));
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
    return absl::NotFoundError(
        absl::StrCat("model '", name, "' has no version ", QuoteUntrusted(version)));
  }
  if (it->second.loaded == nullptr) {
    return absl::UnavailableError(absl::StrCat("not ready: ", it->second.reason));
  }
  return it->second.loaded;
}

absl::StatusOr<std::vector<int64_t>> ModelRegistry::ReadyVersions(absl::string_view name) const {
  std::shared_ptr<const ModelEntry> entry = Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("model ", QuoteUntrusted(name), " not found"));
  }
  std::vector<int64_t> versions;
  for (const auto& [v, slot] : entry->versions) {
    if (slot.loaded != nullptr) versions.push_back(v);
  }
  return versions;
}

std::vector<std::shared_ptr<const LoadedModel>> ModelRegistry::ReadyModels() const {
  std::vector<std::pair<std::string, std::shared_ptr<const ModelEntry>>> entries;
  {
    absl::MutexLock lock(&mutex_);
    entries.assign(models_.begin(), models_.end());
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::shared_ptr<const LoadedModel>> ready;
  for (const auto& [name, entry] : entries) {
    for (const auto& [v, slot] : entry->versions) {
      if (slot.loaded != nullptr) ready.push_back(slot.loaded);
    }
  }
  return ready;
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
