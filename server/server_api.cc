#include "server/server_api.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "server/datatype.h"
#include "server/observability/logging.h"
#include "server/scheduling/sequence_batcher.h"
#include "server/scheduling/sequence_scheduler.h"
#include "server/status_util.h"
#include "server/version.h"

namespace loopserve::server {
namespace {

// A tensor as the version's config declares it: -1 for variable dims and the batch dim.
void FillTensorMetadata(const ModelIo::Tensor& tensor,
                        inference::ModelMetadataResponse::TensorMetadata* out) {
  out->set_name(tensor.name);
  out->set_datatype(std::string(KserveDataType(tensor.dtype)));
  // An unknown rank has no KServe spelling; it is reported as an empty shape.
  if (tensor.dims.has_value()) {
    for (int64_t d : *tensor.dims) out->add_shape(d);
  }
}

void Fill(const ModelVersionStatistics::Duration& d, inference::StatisticDuration* out) {
  out->set_count(d.count);
  out->set_ns(d.ns);
}

}  // namespace

ServerApi::ServerApi(ModelRegistry* registry, const InferenceRunner* runner, Options options)
    : registry_(registry),
      runner_(runner),
      options_(options),
      loader_(/*num_workers=*/1, /*max_queue_size=*/16) {}

absl::Status ServerApi::CheckReady() const {
  if (stopping_.load() || runner_->draining()) {
    return absl::UnavailableError("the server is not ready (shutting down)");
  }
  if (options_.unready_queue_depth > 0 && options_.pool != nullptr) {
    const int queued = options_.pool->queue_size();
    if (queued > options_.unready_queue_depth) {
      return absl::UnavailableError(
          absl::StrCat("the server is not ready: ", queued,
                       " requests wait for a worker (more than --unready_queue_depth=",
                       options_.unready_queue_depth, ")"));
    }
  }
  return absl::OkStatus();
}

ServerApi::~ServerApi() {
  loader_.Shutdown();
  if (!load_root_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(load_root_, ignored);
  }
}

absl::StatusOr<bool> ServerApi::ModelReady(absl::string_view name,
                                           absl::string_view version) const {
  absl::StatusOr<std::shared_ptr<const LoadedModel>> model =
      registry_->Get(std::string(name), std::string(version));
  if (absl::IsNotFound(model.status()) || absl::IsInvalidArgument(model.status())) {
    return model.status();
  }
  return model.ok() && ServerReady();
}

inference::ServerMetadataResponse ServerApi::ServerMetadata() const {
  inference::ServerMetadataResponse response;
  response.set_name(kServerName);
  response.set_version(kServerVersion);
  // The Triton extensions served in full.
  response.add_extensions("model_repository");
  response.add_extensions("model_configuration");
  response.add_extensions("statistics");
  response.add_extensions("binary_tensor_data");
  response.add_extensions("parameters");
  response.add_extensions("system_shared_memory");
  response.add_extensions("logging");
  response.add_extensions("trace");
  return response;
}

absl::StatusOr<inference::ModelMetadataResponse> ServerApi::ModelMetadata(
    absl::string_view name, absl::string_view version) const {
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model,
                      registry_->Get(std::string(name), std::string(version)));
  LS_ASSIGN_OR_RETURN(std::vector<int64_t> versions, registry_->ReadyVersions(std::string(name)));
  inference::ModelMetadataResponse response;
  response.set_name(model->name);
  for (int64_t v : versions) response.add_versions(absl::StrCat(v));
  response.set_platform(model->platform);
  for (const ModelIo::Tensor& input : model->io.inputs()) {
    FillTensorMetadata(input, response.add_inputs());
  }
  for (const ModelIo::Tensor& output : model->io.outputs()) {
    FillTensorMetadata(output, response.add_outputs());
  }
  return response;
}

absl::StatusOr<inference::ModelConfig> ServerApi::ModelConfig(absl::string_view name,
                                                              absl::string_view version) const {
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model,
                      registry_->Get(std::string(name), std::string(version)));
  return model->config;
}

inference::RepositoryIndexResponse ServerApi::RepositoryIndex(bool ready_only) const {
  inference::RepositoryIndexResponse response;
  for (const ModelRegistry::ModelState& model : registry_->Index()) {
    if (model.versions.empty() && !ready_only) {
      auto* entry = response.add_models();
      entry->set_name(model.name);
      entry->set_state("UNAVAILABLE");
      entry->set_reason(model.reason);
    }
    for (const ModelRegistry::VersionState& version : model.versions) {
      if (ready_only && !version.ready) continue;
      auto* entry = response.add_models();
      entry->set_name(model.name);
      entry->set_version(absl::StrCat(version.version));
      entry->set_state(version.ready ? "READY" : "UNAVAILABLE");
      entry->set_reason(version.reason);
    }
  }
  return response;
}

absl::StatusOr<inference::ModelStatisticsResponse> ServerApi::ModelStatistics(
    absl::string_view name, absl::string_view version) const {
  std::vector<std::shared_ptr<const LoadedModel>> models;
  const std::string model_name(name);
  if (name.empty()) {
    if (!version.empty()) {
      return absl::InvalidArgumentError("ModelStatistics: a version needs a model name");
    }
    models = registry_->ReadyModels();
  } else if (version.empty()) {
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> versions, registry_->ReadyVersions(model_name));
    for (int64_t v : versions) {
      absl::StatusOr<std::shared_ptr<const LoadedModel>> model =
          registry_->Get(model_name, absl::StrCat(v));
      if (model.ok()) models.push_back(*std::move(model));  // unloaded meanwhile: skipped
    }
  } else {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model,
                        registry_->Get(model_name, std::string(version)));
    models.push_back(std::move(model));
  }
  inference::ModelStatisticsResponse response;
  for (const std::shared_ptr<const LoadedModel>& model : models) {
    const ModelVersionStatistics stats = model->metrics->Statistics();
    inference::ModelStatistics* out = response.add_model_stats();
    out->set_name(model->name);
    out->set_version(model->version_string);
    out->set_last_inference(stats.last_inference_ms);
    out->set_inference_count(stats.inference_count);
    out->set_execution_count(stats.execution_count);
    inference::InferStatistics* infer = out->mutable_inference_stats();
    Fill(stats.success, infer->mutable_success());
    Fill(stats.fail, infer->mutable_fail());
    Fill(stats.queue, infer->mutable_queue());
    Fill(stats.compute_input, infer->mutable_compute_input());
    Fill(stats.compute_infer, infer->mutable_compute_infer());
    Fill(stats.compute_output, infer->mutable_compute_output());
    // No response cache: Triton's cache counters are present and zero.
    infer->mutable_cache_hit();
    infer->mutable_cache_miss();
    for (const ModelVersionStatistics::Loop& loop : stats.loops) {
      inference::LoopStatistics* l = out->add_loop_stats();
      l->set_name(loop.name);
      Fill(loop.execution, l->mutable_execution());
      l->set_iteration_count(loop.iterations);
      l->set_ns_per_iteration(loop.iterations > 0 ? loop.execution.ns / loop.iterations : 0);
    }
    // A version with sequence_batching is scheduled by its SequenceBatcher.
    if (const auto* sequences = dynamic_cast<const SequenceScheduler*>(model->scheduler.get());
        sequences != nullptr) {
      const SequenceBatcher::Stats s = sequences->batcher().stats();
      inference::SequenceStatistics* seq = out->mutable_sequence_stats();
      seq->set_live(s.live);
      seq->set_slots(s.slots);
      seq->set_backlog(s.backlog);
      seq->set_started(s.started);
      seq->set_ended(s.ended);
      seq->set_expired(s.expired);
      seq->set_aborted(s.failed);
      seq->set_restarted(s.restarts);
      seq->set_rejected(s.rejected);
      seq->set_step_count(s.steps);
      seq->set_execution_count(s.executions);
      seq->set_steps_per_execution(
          s.executions > 0 ? static_cast<double>(s.steps) / static_cast<double>(s.executions) : 0);
    }
  }
  return response;
}

absl::Status ServerApi::Load(absl::string_view rpc, const std::string& repository_name,
                             const std::string& model, LoadParameters parameters, Done done) {
  if (!parameters.files.empty() && !parameters.config_json.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("failed to load ", QuoteUntrusted(model),
                     ": model files sent in the request need a 'config' parameter too"));
  }
  auto change = [this, model, parameters = std::move(parameters)]() -> absl::Status {
    absl::Status status;
    if (parameters.empty()) {
      status = registry_->Load(model);
    } else {
      status = LoadWithParameters(model, parameters);
    }
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat("failed to load ", QuoteUntrusted(model), ": ",
                                                    status.message()));
  };
  return ScheduleChange(rpc, repository_name, std::move(change), std::move(done));
}

absl::Status ServerApi::LoadWithParameters(const std::string& model,
                                           const LoadParameters& parameters) {
  ModelRegistry::LoadOverride load_override;
  if (parameters.config_json.has_value()) {
    LS_ASSIGN_OR_RETURN(load_override.config_text, ConfigJsonToText(*parameters.config_json));
  }
  if (!parameters.files.empty()) {
    if (load_root_.empty()) {
      std::string pattern = (std::filesystem::temp_directory_path() / "loopserve-load-XXXXXX");
      if (mkdtemp(pattern.data()) == nullptr) {
        return absl::InternalError(
            absl::StrCat("failed to poll from model repository: cannot make a private folder: ",
                         std::strerror(errno)));
      }
      load_root_ = pattern;
    }
    load_override.dir = absl::StrCat(load_root_, "/", ++loads_with_files_);
    absl::Status written = WriteLoadFiles(load_override.dir, parameters.files);
    // The engine holds what it loaded: the files go at once, so repeated loads never fill the
    // disk.
    absl::Status loaded = written.ok() ? registry_->Load(model, &load_override) : written;
    std::error_code ignored;
    std::filesystem::remove_all(load_override.dir, ignored);
    return loaded;
  }
  return registry_->Load(model, &load_override);
}

absl::Status ServerApi::Unload(absl::string_view rpc, const std::string& repository_name,
                               const std::string& model, Done done) {
  return ScheduleChange(
      rpc, repository_name, [this, model] { return registry_->Unload(model); }, std::move(done));
}

absl::Status ServerApi::CudaSharedMemoryUnsupported() {
  return absl::UnimplementedError(
      "CUDA shared memory is not supported: loopserve runs models on the CPU only; use system "
      "shared memory (register_system_shared_memory) instead");
}

absl::Status ServerApi::ScheduleChange(absl::string_view rpc, const std::string& repository_name,
                                       std::function<absl::Status()> change, Done done) {
  if (!options_.model_control) {
    return absl::FailedPreconditionError(absl::StrCat(
        rpc, " needs explicit model control (--model_control_mode=explicit); this server ",
        "picks up repository changes by itself or not at all"));
  }
  if (!repository_name.empty()) {
    return absl::InvalidArgumentError("loopserve has one repository: leave repository_name empty");
  }
  return loader_.TrySchedule(
      [rpc = std::string(rpc), change = std::move(change), done = std::move(done)] {
        const absl::Status result = CatchExceptions(absl::StrCat(rpc, ": "), change);
        if (!result.ok()) LogDebug(absl::StrCat(rpc, " failed: ", result.ToString()));
        done(result);
      });
}

}  // namespace loopserve::server
