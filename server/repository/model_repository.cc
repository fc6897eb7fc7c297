#include "server/repository/model_repository.h"

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
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "server/observability/logging.h"
#include "server/repository/model_config.h"
#include "server/repository/model_warmup.h"
#include "server/repository/repo_file.h"
#include "server/scheduling/batching.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace fs = std::filesystem;

namespace {
// Triton's answer for a model the registry does not know (clients match on the words).
absl::Status UnknownModelError(absl::string_view name) {
  return absl::NotFoundError(
      absl::StrCat("Request for unknown model: ", QuoteUntrusted(name), " is not found"));
}
}  // namespace

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
                                    const inference::ModelVersionPolicy& policy) {
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

namespace {

// The folder, then "name:size:mtime;" for every regular file under `dir`, sorted: changes when a
// file is added, removed, rewritten or touched (or the model moves, in config.json).
std::string Fingerprint(const std::string& dir) {
  std::vector<std::string> parts = {dir};
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

// The serialized config with map entries in a fixed order (plain serialization may order a map
// differently each time, which would look like a config change on every poll).
std::string DeterministicBytes(const inference::ModelConfig& config) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    config.SerializeToCodedStream(&coded);
  }
  return bytes;
}

absl::Status StoppedError() {
  return absl::CancelledError("model loading stopped: the server is stopping");
}

}  // namespace

ModelRegistry::ModelRegistry(Options options)
    : options_([&] {
        Options o = std::move(options);
        if (!o.loader) o.loader = &engine::Model::Load;
        return o;
      }()) {
  if (options_.loader_threads > 0) {
    // Loads wait for nothing but files and the CPU: the queue holds every model of a repository.
    loader_pool_ = std::make_unique<WorkerPool>(options_.loader_threads, kMaxQueuedLoads);
  }
}

absl::Status ModelRegistry::LoadAll() { return Poll(); }

absl::StatusOr<std::vector<ModelRegistry::ModelSource>> ModelRegistry::ListModels(
    std::unique_ptr<OvmsConfig>* ovms_config) {
  std::vector<ModelSource> sources;
  if (options_.config_path.empty()) {
    LS_ASSIGN_OR_RETURN(std::vector<std::string> names, ScanModelNames(options_.root));
    for (std::string& name : names) {
      ModelSource source;
      source.dir = (fs::path(options_.root) / name).string();
      source.name = std::move(name);
      sources.push_back(std::move(source));
    }
    return sources;
  }
  LS_ASSIGN_OR_RETURN(OvmsConfig config, ReadOvmsConfig(options_.config_path));
  *ovms_config = std::make_unique<OvmsConfig>(std::move(config));
  // Log what it ignores once per change of the file, not on every poll.
  std::string text;
  for (const std::string& line : (*ovms_config)->ignored) absl::StrAppend(&text, line, "\n");
  for (const OvmsModelEntry& entry : (*ovms_config)->models) {
    absl::StrAppend(&text, entry.name, "=", entry.base_path, ";");
  }
  if (text != ovms_config_text_) {
    for (const std::string& line : (*ovms_config)->ignored) {
      LogWarning(absl::StrCat("'", options_.config_path, "': ", line));
    }
    LogInfo(absl::StrCat("'", options_.config_path, "' lists ", (*ovms_config)->models.size(),
                         " models"));
    ovms_config_text_ = std::move(text);
  }
  for (const OvmsModelEntry& entry : (*ovms_config)->models) {
    ModelSource source;
    source.name = entry.name;
    source.dir = entry.base_path;
    source.ovms = &entry;
    sources.push_back(std::move(source));
  }
  std::sort(sources.begin(), sources.end(),
            [](const ModelSource& a, const ModelSource& b) { return a.name < b.name; });
  return sources;
}

ModelRegistry::~ModelRegistry() {
  if (loader_pool_ != nullptr) loader_pool_->Shutdown();  // before the members its loads use
}

absl::Status ModelRegistry::Poll() { return PollModels(/*wait=*/true); }

absl::Status ModelRegistry::StartPoll() { return PollModels(/*wait=*/false); }

absl::Status ModelRegistry::PollModels(bool wait) {
  auto pending = std::make_shared<PendingLoads>();
  {
    absl::MutexLock load_lock(&load_mutex_);
    std::unique_ptr<OvmsConfig> listed;
    LS_ASSIGN_OR_RETURN(std::vector<ModelSource> sources, ListModels(&listed));
    // The sources point into the config; loads that outlive this call keep it.
    const std::shared_ptr<const OvmsConfig> ovms_config(std::move(listed));
    std::vector<std::string> names;
    for (const ModelSource& source : sources) {
      if (Stopping()) return StoppedError();
      StartLoad(source, ovms_config, pending, wait);
      names.push_back(source.name);
    }
    std::vector<std::string> removed;
    {
      absl::MutexLock lock(&mutex_);
      for (const auto& [name, entry] : models_) {
        // A model whose load still runs is looked at again by the poll after it.
        if (!std::binary_search(names.begin(), names.end(), name) && !loading_.contains(name)) {
          removed.push_back(name);
        }
      }
      for (const std::string& name : removed) ++epochs_[name];  // a load in flight installs nothing
    }
    for (const std::string& name : removed) {
      Install(name, nullptr,
              options_.config_path.empty() ? "its folder was removed from the repository"
                                           : "it was removed from the config file");
    }
  }
  if (wait) {
    absl::MutexLock lock(&pending->mutex);
    while (pending->left > 0) pending->done.Wait(&pending->mutex);
  }
  if (Stopping()) return StoppedError();
  return absl::OkStatus();
}

void ModelRegistry::StartLoad(const ModelSource& source,
                              std::shared_ptr<const OvmsConfig> ovms_config,
                              std::shared_ptr<PendingLoads> pending, bool wait) {
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mutex_);
    // Still loading (a long warm-up): a waiting poll waits for it (the caller wants this poll's
    // outcome); otherwise it is left to a later poll, which then sees what changed.
    while (wait && loading_.contains(source.name)) load_done_.Wait(&mutex_);
    if (!loading_.insert(source.name).second) return;
    epoch = epochs_[source.name];
  }
  {
    absl::MutexLock lock(&pending->mutex);
    ++pending->left;
  }
  auto load = [this, source, ovms_config, pending, epoch] {
    const absl::Status thrown = CatchExceptions("loading the model: ", [&] {
      std::shared_ptr<const ModelEntry> previous = Find(source.name);
      absl::Status error;
      std::shared_ptr<const ModelEntry> entry =
          BuildEntry(source, previous.get(), /*retry_failed=*/false, &error);
      // Built while the stop came (warm-ups cancelled, versions left out): not installed.
      if (!Stopping()) Install(source.name, std::move(entry), "", epoch);
      return absl::OkStatus();
    });
    if (!thrown.ok()) LogError(absl::StrCat("model '", source.name, "': ", thrown.message()));
    {
      absl::MutexLock lock(&mutex_);
      loading_.erase(source.name);
      load_done_.SignalAll();
    }
    absl::MutexLock lock(&pending->mutex);
    if (--pending->left == 0) pending->done.SignalAll();
  };
  if (loader_pool_ != nullptr && loader_pool_->TrySchedule(load).ok()) return;
  load();  // no loader pool (or it is stopping): on this thread
}

absl::Status ModelRegistry::Load(absl::string_view name, const LoadOverride* load_override) {
  if (!IsValidModelName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid model name ", QuoteUntrusted(name),
                     " (a model name is one folder name of the repository)"));
  }
  const std::string model(name);
  absl::MutexLock load_lock(&load_mutex_);
  std::unique_ptr<OvmsConfig> ovms_config;
  LS_ASSIGN_OR_RETURN(std::vector<ModelSource> sources, ListModels(&ovms_config));
  auto source = std::find_if(sources.begin(), sources.end(),
                             [&](const ModelSource& s) { return s.name == model; });
  if (load_override != nullptr && !load_override->dir.empty()) {
    if (source == sources.end()) {
      ModelSource request_source;
      request_source.name = model;
      source = sources.insert(sources.end(), std::move(request_source));
    }
    source->dir = load_override->dir;
    source->ovms = nullptr;
    source->private_dir = true;
  }
  if (load_override != nullptr && source != sources.end()) {
    source->config_text = load_override->config_text;
  }
  if (source == sources.end()) {
    return absl::NotFoundError(
        options_.config_path.empty()
            ? absl::StrCat("model '", model, "' is not in the model repository")
            : absl::StrCat("model '", model, "' is not listed in the config file"));
  }
  if (Stopping()) return StoppedError();
  {
    absl::MutexLock lock(&mutex_);
    ++epochs_[model];  // this load's result wins over a poll's load still running
  }
  std::shared_ptr<const ModelEntry> previous = Find(model);
  absl::Status error;
  std::shared_ptr<const ModelEntry> entry =
      BuildEntry(*source, previous.get(), /*retry_failed=*/true, &error);
  if (Stopping()) return StoppedError();
  Install(model, std::move(entry), "");
  return error;
}

absl::Status ModelRegistry::Unload(absl::string_view name) {
  absl::MutexLock load_lock(&load_mutex_);
  const std::string model(name);
  if (Find(model) == nullptr) {
    bool known = false;
    std::unique_ptr<OvmsConfig> ovms_config;
    if (IsValidModelName(name)) {
      absl::StatusOr<std::vector<ModelSource>> sources = ListModels(&ovms_config);
      known = sources.ok() && std::any_of(sources->begin(), sources->end(),
                                          [&](const ModelSource& s) { return s.name == model; });
    }
    if (!known) {
      return UnknownModelError(name);
    }
  }
  {
    absl::MutexLock lock(&mutex_);
    ++epochs_[model];  // a poll's load still running installs nothing
  }
  auto entry = std::make_shared<ModelEntry>();
  entry->reason = "unloaded";
  Install(model, std::move(entry), "unloaded by request");
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const LoadedModel>> ModelRegistry::Prepare(
    const ModelSource& source, const ParsedModelConfig& parsed, int64_t version,
    const std::string& file, std::shared_ptr<const engine::Model> model,
    std::shared_ptr<ModelVersionMetrics> metrics) const {
  CompletionOptions completion;
  completion.auto_complete = options_.auto_complete;
  completion.max_loop_iterations = options_.max_loop_iterations;
  completion.max_output_bytes = options_.max_output_bytes;
  completion.max_request_memory_bytes = options_.max_request_memory_bytes;
  completion.loop_threads = options_.loop_threads;
  completion.precision = options_.precision;
  completion.default_instance_count = options_.default_instance_count;
  LS_ASSIGN_OR_RETURN(inference::ModelConfig config,
                      CompleteModelConfig(parsed, *model, file, completion));

  auto loaded = std::make_shared<LoadedModel>();
  loaded->name = source.name;
  loaded->version = version;
  loaded->version_string = absl::StrCat(version);
  loaded->platform = config.platform();
  loaded->path = file;
  loaded->max_loop_iterations =
      ParameterOr(config, kMaxLoopIterationsParameter, options_.max_loop_iterations);
  loaded->max_output_bytes =
      ParameterOr(config, kMaxOutputBytesParameter, options_.max_output_bytes);
  loaded->max_request_memory_bytes =
      ParameterOr(config, kMaxRequestMemoryBytesParameter, options_.max_request_memory_bytes);
  loaded->loop_threads = LoopThreadsOr(config, options_.loop_threads);
  loaded->precision = PrecisionOr(config, options_.precision);
  loaded->io = ModelIo::Build(config, *model);
  // A count the config gives caps the version's concurrent runs; the default (--workers) is what
  // the worker pool allows anyway, so it needs no cap of its own.
  bool explicit_count = false;
  for (const inference::ModelInstanceGroup& group : parsed.config.instance_group()) {
    explicit_count |= group.kind() != inference::ModelInstanceGroup::KIND_GPU && group.count() > 0;
  }
  if (explicit_count) loaded->instances = std::make_shared<TaskGroup>(InstanceCount(config));
  if (std::optional<BatchingPolicy> policy = BatchingPolicy::FromConfig(config)) {
    for (size_t j = 0; j < model->outputs().size(); ++j) {
      if (loaded->io.OutputBatchAxis(static_cast<int>(j)) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("config.pbtxt: dynamic_batching: output '", model->outputs()[j].name,
                         "' has no batch axis (a sequence), so merged batches could not be split"));
      }
    }
  }
  SchedulerContext scheduling;
  scheduling.model = model;
  scheduling.model_dir = source.dir;
  scheduling.instances = loaded->instances;
  scheduling.label = absl::StrCat("model '", source.name, "' v", version, ": ");
  if (options_.metrics != nullptr && config.has_sequence_batching()) {
    scheduling.sequence_metrics = options_.metrics->ForSequences(source.name, version);
  }
  LS_ASSIGN_OR_RETURN(loaded->scheduler, MakeScheduler(config, std::move(scheduling)));
  loaded->config = std::move(config);

  if (loaded->config.model_warmup_size() > 0) {
    WarmupOptions warmup;
    warmup.max_loop_iterations = loaded->max_loop_iterations;
    warmup.max_output_bytes = loaded->max_output_bytes;
    warmup.max_memory_bytes = loaded->max_request_memory_bytes;
    warmup.loop_threads = loaded->loop_threads;
    warmup.run_timeout = options_.warmup_run_timeout;
    warmup.intra_op_threads = options_.intra_op_threads;
    warmup.cancelled = options_.stop;
    LogInfo(absl::StrCat("model '", source.name, "' v", version, ": warming up (",
                         loaded->config.model_warmup_size(), " samples)"));
    const absl::Time start = absl::Now();
    LS_ASSIGN_OR_RETURN(const int64_t runs,
                        RunModelWarmup(loaded->config, loaded->io, *model, source.dir, warmup));
    LogInfo(absl::StrCat(
        "model '", source.name, "' v", version, ": ", runs, " warm-up runs of ",
        loaded->config.model_warmup_size(), " samples in ",
        absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Microseconds(100)))));
  }
  if (metrics == nullptr) {
    metrics = options_.metrics != nullptr
                  ? options_.metrics->ForModelVersion(source.name, version, model->loop_names())
                  : ModelVersionMetrics::StatisticsOnly(model->loop_names());
  }
  loaded->metrics = std::move(metrics);
  loaded->scheduler->SetMetrics(loaded->metrics);
  loaded->model = std::move(model);
  return std::shared_ptr<const LoadedModel>(std::move(loaded));
}

absl::StatusOr<ParsedModelConfig> ModelRegistry::ReadSourceConfig(const ModelSource& source) const {
  // A repository's model folder may not lead out of it; a config.json entry's base_path is the
  // operator's choice. Every file is then opened inside the model folder
  // (server/repository/repo_file.h).
  // A load request's files are in a private folder of the server's own (LoadOverride).
  const absl::Status folder =
      source.ovms != nullptr || source.private_dir
          ? absl::OkStatus()
          : CheckRepositoryFolder(options_.root, source.dir,
                                  absl::StrCat("model '", source.name, "': its folder"));
  absl::StatusOr<ParsedModelConfig> parsed =
      !folder.ok()                     ? absl::StatusOr<ParsedModelConfig>(folder)
      : source.config_text.has_value() ? ParseModelConfig(*source.config_text, source.name)
                                       : ReadModelConfig(source.dir, source.name);
  if (parsed.ok() && source.ovms != nullptr) ApplyOvmsEntry(*source.ovms, *parsed);
  std::error_code ec;
  if (parsed.ok() && !fs::is_directory(source.dir, ec)) {
    // Reasons reach clients (RepositoryIndex, ModelReady): no server paths in them.
    parsed = absl::NotFoundError(
        absl::StrCat("model '", source.name, "': its base_path is not a directory"));
  }
  return parsed;
}

std::shared_ptr<const ModelRegistry::ModelEntry> ModelRegistry::BuildEntry(
    const ModelSource& source, const ModelEntry* previous, bool retry_failed,
    absl::Status* error) const {
  *error = absl::OkStatus();
  const std::string& name = source.name;
  auto entry = std::make_shared<ModelEntry>();
  auto has_loaded = [](const ModelEntry* e) {
    if (e == nullptr) return false;
    for (const auto& [v, slot] : e->versions) {
      if (slot.loaded != nullptr) return true;
    }
    return false;
  };
  absl::StatusOr<ParsedModelConfig> parsed = ReadSourceConfig(source);
  if (!parsed.ok()) {
    *error = parsed.status();
    const std::string reason = BoundMessage(parsed.status().message());
    // A broken config must not take down versions that serve: keep them until it is fixed.
    if (has_loaded(previous)) *entry = *previous;
    if (previous == nullptr || previous->reason != reason) {
      LogError(absl::StrCat("model '", name, "' not loaded: ", reason,
                            has_loaded(previous) ? " (the loaded versions keep serving)" : ""));
    }
    entry->reason = reason;
    return entry;
  }
  entry->config_key = absl::StrCat(source.dir, "\n", DeterministicBytes(parsed->config));
  const bool config_changed = previous == nullptr || previous->config_key != entry->config_key;
  if (config_changed) {
    for (const std::string& line : parsed->ignored) {
      LogWarning(
          absl::StrCat("model '", name, "': ", parsed->from_file ? "config.pbtxt: " : "", line));
    }
  }
  const std::vector<int64_t> selected =
      SelectVersions(ScanVersions(source.dir), parsed->config.version_policy());
  if (selected.empty()) {
    entry->reason =
        absl::StrCat("model '", name, "': no version folder matches the version policy");
    *error = absl::NotFoundError(entry->reason);
    if (previous == nullptr || previous->reason != entry->reason) {
      LogError(absl::StrCat("model '", name, "' not loaded: ", entry->reason));
    }
    return entry;
  }

  bool any_failed = false;
  for (int64_t version : selected) {
    if (Stopping()) break;  // the caller discards the entry
    const VersionSlot* old = nullptr;
    if (previous != nullptr) {
      auto it = previous->versions.find(version);
      if (it != previous->versions.end()) old = &it->second;
    }
    const VersionOutcome outcome =
        BuildVersion(source, *parsed, version, old, retry_failed, *entry, error);
    if (outcome == VersionOutcome::kStopped) break;  // the caller discards the entry
    any_failed |= outcome == VersionOutcome::kFailed;
  }
  // A new version that failed must not leave the model without the versions it was to replace.
  if (any_failed && previous != nullptr) RetainVersions(source, *previous, *entry);
  return entry;
}

ModelRegistry::VersionOutcome ModelRegistry::BuildVersion(const ModelSource& source,
                                                          const ParsedModelConfig& parsed,
                                                          int64_t version, const VersionSlot* old,
                                                          bool retry_failed, ModelEntry& entry,
                                                          absl::Status* error) const {
  const std::string version_dir = (fs::path(source.dir) / absl::StrCat(version)).string();
  const std::string fingerprint = Fingerprint(version_dir);
  VersionSlot& slot = entry.versions[version];
  if (old != nullptr && old->fingerprint == fingerprint) {
    if (!retry_failed && old->failed_config_key == entry.config_key) {
      // The same files under the same config failed before: they would fail the same way.
      slot = *old;
      return old->loaded == nullptr ? VersionOutcome::kFailed : VersionOutcome::kServing;
    }
    if (old->loaded != nullptr && old->loaded_fingerprint == fingerprint) {
      slot = *old;
      slot.reason.clear();
      slot.failed_config_key.clear();
      if (old->config_key == entry.config_key) return VersionOutcome::kServing;
      // The model was compiled for its precision: another one needs the files loaded again.
      if (old->loaded->precision == PrecisionOr(parsed.config, options_.precision)) {
        return Reconfigure(source, parsed, version, entry.config_key, slot, error);
      }
    }
    // A failed load, or a failed reload of a serving version: try the files again.
  }
  return Load(source, parsed, version, version_dir, fingerprint, old, entry.config_key, slot,
              error);
}

ModelRegistry::VersionOutcome ModelRegistry::Reconfigure(
    const ModelSource& source, const ParsedModelConfig& parsed, int64_t version,
    const std::string& config_key, VersionSlot& slot, absl::Status* error) const {
  // Same files, another config: validate and warm the loaded model again.
  const std::string label = absl::StrCat("model '", source.name, "' v", version);
  const std::shared_ptr<const LoadedModel> serving = slot.loaded;
  absl::StatusOr<std::shared_ptr<const LoadedModel>> reconfigured =
      absl::InternalError("not reconfigured");
  const absl::Status thrown = CatchExceptions("reconfiguring the model: ", [&] {
    reconfigured =
        Prepare(source, parsed, version, serving->path, serving->model, serving->metrics);
    return absl::OkStatus();
  });
  if (!thrown.ok()) reconfigured = thrown;
  if (!reconfigured.ok() && Stopping()) return VersionOutcome::kStopped;
  if (reconfigured.ok()) {
    slot.loaded = *std::move(reconfigured);
    slot.config_key = config_key;
    LogInfo(absl::StrCat("reconfigured ", label, " (its config changed)"));
    return VersionOutcome::kServing;
  }
  if (*error == absl::OkStatus()) {
    *error = Annotate(reconfigured.status(), absl::StrCat(label, ": "));
  }
  slot.reason = BoundMessage(absl::StrCat("new config rejected, serving the previous one: ", label,
                                          ": ", reconfigured.status().ToString()));
  slot.failed_config_key = config_key;
  LogError(absl::StrCat("new config of ", label, " rejected (the previous config keeps serving): ",
                        reconfigured.status().ToString()));
  return VersionOutcome::kServing;
}

absl::StatusOr<std::string> ModelRegistry::FindSafeModelFile(
    const ModelSource& source, const std::string& version_dir,
    const ParsedModelConfig& parsed) const {
  LS_ASSIGN_OR_RETURN(std::string file, FindModelFile(version_dir, parsed.config,
                                                      /*any_name=*/source.ovms != nullptr));
  // The engine opens it (and an OpenVINO IR's weights beside it) by path: check them as
  // repository files first. Missing weights are the engine's to report.
  LS_RETURN_IF_ERROR(CheckRepositoryFile(
      source.dir, file, absl::StrCat("model file ", fs::path(file).filename().string())));
  if (absl::EndsWith(file, ".xml")) {
    const fs::path weights = fs::path(file).replace_extension(".bin");
    const absl::Status safe = CheckRepositoryFile(
        source.dir, weights.string(), absl::StrCat("weights file ", weights.filename().string()));
    if (!safe.ok() && !absl::IsNotFound(safe)) return safe;
  }
  return file;
}

ModelRegistry::VersionOutcome ModelRegistry::Load(
    const ModelSource& source, const ParsedModelConfig& parsed, int64_t version,
    const std::string& version_dir, const std::string& fingerprint, const VersionSlot* old,
    const std::string& config_key, VersionSlot& slot, absl::Status* error) const {
  const std::string label = absl::StrCat("model '", source.name, "' v", version);
  // The memory budget also caps the model's constants at load.
  engine::LoadOptions load_options;
  load_options.max_file_bytes = options_.max_model_file_bytes;
  load_options.max_memory_bytes = ParameterOr(parsed.config, kMaxRequestMemoryBytesParameter,
                                              options_.max_request_memory_bytes);
  load_options.precision = PrecisionOr(parsed.config, options_.precision);
  load_options.force_precision = options_.force_precision;
  load_options.name = label;
  const absl::Time start = absl::Now();
  const absl::StatusOr<std::string> file = FindSafeModelFile(source, version_dir, parsed);
  // An exception of the loader or the warm-up (std::bad_alloc) fails this version only.
  absl::StatusOr<std::shared_ptr<const LoadedModel>> loaded = absl::InternalError("not loaded");
  const absl::Status thrown = CatchExceptions("loading the model: ", [&] {
    absl::StatusOr<std::shared_ptr<const engine::Model>> model =
        file.ok() ? options_.loader(*file, load_options) : file.status();
    loaded = model.ok() ? Prepare(source, parsed, version, *file, *model, nullptr) : model.status();
    return absl::OkStatus();
  });
  if (!thrown.ok()) loaded = thrown;
  const absl::Duration took = absl::Now() - start;
  // Not a failure of the model: the caller discards the entry.
  if (!loaded.ok() && Stopping()) return VersionOutcome::kStopped;
  slot.fingerprint = fingerprint;
  slot.failed_config_key.clear();
  if (options_.metrics != nullptr) {
    options_.metrics->RecordModelLoad(source.name, version, loaded.ok(), took);
  }
  if (!loaded.ok()) {
    const std::string reason = BoundMessage(absl::StrCat(label, ": ", loaded.status().ToString()));
    if (*error == absl::OkStatus()) *error = Annotate(loaded.status(), absl::StrCat(label, ": "));
    slot.failed_config_key = config_key;
    if (old != nullptr && old->loaded != nullptr) {
      // A reload of a serving version failed: the files it was loaded from keep serving.
      slot.loaded = old->loaded;
      slot.loaded_fingerprint = old->loaded_fingerprint;
      slot.config_key = old->config_key;
      slot.reason = absl::StrCat("reload failed, serving the previous load: ", reason);
      LogError(absl::StrCat("reload of ", label, " failed (the previous load keeps serving): ",
                            loaded.status().ToString()));
      return VersionOutcome::kServing;
    }
    slot.reason = reason;
    LogError(absl::StrCat("failed to load ", label, ": ", loaded.status().ToString()));
    return VersionOutcome::kFailed;
  }
  slot.loaded = *std::move(loaded);
  slot.loaded_fingerprint = fingerprint;
  slot.config_key = config_key;
  LogInfo(absl::StrCat(old != nullptr ? "reloaded " : "loaded ", label, " from '", *file, "' in ",
                       absl::FormatDuration(absl::Trunc(took, absl::Microseconds(100))), " (",
                       slot.loaded->model->inputs().size(), " inputs, ",
                       slot.loaded->model->outputs().size(), " outputs, ",
                       slot.loaded->model->loop_names().size(), " loops, precision ",
                       PrecisionName(slot.loaded->precision), ")"));
  return VersionOutcome::kServing;
}

void ModelRegistry::RetainVersions(const ModelSource& source, const ModelEntry& previous,
                                   ModelEntry& entry) const {
  // Those stay loaded (while their folders exist) until the new version loads.
  std::error_code ec;
  for (const auto& [version, old] : previous.versions) {
    if (old.loaded == nullptr || entry.versions.count(version) > 0) continue;
    if (!fs::is_directory(fs::path(source.dir) / absl::StrCat(version), ec)) continue;
    VersionSlot& slot = entry.versions[version];
    slot = old;
    slot.reason = "retained: a newer version selected by the version policy failed to load";
    if (old.reason != slot.reason) {
      LogWarning(absl::StrCat("model '", source.name, "' v", version,
                              " keeps serving: a newer version failed to load"));
    }
  }
}

void ModelRegistry::Install(const std::string& name, std::shared_ptr<const ModelEntry> entry,
                            absl::string_view why_unloaded, std::optional<uint64_t> epoch) {
  std::shared_ptr<const ModelEntry> old;
  {
    absl::MutexLock lock(&mutex_);
    // Unloaded, removed or loaded again by request since this load started: it is stale.
    if (epoch.has_value() && epochs_[name] != *epoch) return;
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
    return UnknownModelError(name);
  }
  if (version.empty()) {
    for (auto it = entry->versions.rbegin(); it != entry->versions.rend(); ++it) {
      if (it->second.loaded != nullptr) return it->second.loaded;
    }
    std::vector<std::string> reasons;
    if (!entry->reason.empty()) reasons.push_back(entry->reason);
    for (const auto& [v, slot] : entry->versions) reasons.push_back(slot.reason);
    return absl::UnavailableError(BoundMessage(
        absl::StrCat("model '", name, "' has no ready version: ", absl::StrJoin(reasons, "; "))));
  }
  const std::optional<int64_t> number = ParseVersion(version);
  if (!number) {
    // Triton's code and words: clients match on them.
    return absl::InvalidArgumentError(
        absl::StrCat("failed to get model version from specified version string ",
                     QuoteUntrusted(version), ", version should be an integral value > 0"));
  }
  auto it = entry->versions.find(*number);
  if (it == entry->versions.end()) {
    return absl::NotFoundError(
        absl::StrCat("Request for unknown model: '", name, "' version ", *number, " is not found"));
  }
  if (it->second.loaded == nullptr) {
    return absl::UnavailableError(absl::StrCat("not ready: ", it->second.reason));
  }
  return it->second.loaded;
}

absl::StatusOr<std::vector<int64_t>> ModelRegistry::ReadyVersions(absl::string_view name) const {
  std::shared_ptr<const ModelEntry> entry = Find(name);
  if (entry == nullptr) {
    return UnknownModelError(name);
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
    // Reasons reach clients (RepositoryIndex) and are bounded as every error message is.
    ModelState state{name, BoundMessage(entry->reason), {}};
    for (const auto& [v, slot] : entry->versions) {
      // A model-level failure (a config that does not parse) is the current state of every
      // version it left serving under its previous config.
      std::string reason = slot.reason;
      if (!entry->reason.empty() && entry->reason != "unloaded") {
        reason = absl::StrCat(slot.loaded != nullptr ? "serving the previous config: " : "",
                              entry->reason);
      }
      state.versions.push_back(
          VersionState{v, slot.loaded != nullptr, BoundMessage(std::move(reason))});
    }
    index.push_back(std::move(state));
  }
  // As Triton's index: every model of the repository, the ones never loaded too (explicit model
  // control), so a client can discover what to load.
  if (options_.config_path.empty()) {
    absl::StatusOr<std::vector<std::string>> names = ScanModelNames(options_.root);
    if (names.ok()) {
      const size_t known = index.size();
      for (std::string& name : *names) {
        auto it = std::find_if(index.begin(), index.begin() + known,
                               [&](const ModelState& m) { return m.name == name; });
        if (it == index.begin() + known)
          index.push_back(ModelState{std::move(name), "not loaded", {}});
      }
      std::sort(index.begin(), index.end(),
                [](const ModelState& a, const ModelState& b) { return a.name < b.name; });
    }
  }
  return index;
}

}  // namespace loopserve::server
