#include "server/inference_service.h"

#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/base/status_macros.h"
#include "server/datatype.h"
#include "server/logging.h"
#include "server/status_util.h"
#include "server/tensor_codec.h"
#include "server/version.h"

namespace loopserve::server {
namespace {

// Runs `body` (which fills the response) and finishes the call with its status. Exceptions become
// INTERNAL here so they never reach gRPC.
template <typename Body>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, absl::string_view rpc,
                                 Body&& body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status;
  try {
    status = body();
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat(rpc, ": ", e.what()));
  } catch (...) {
    status = absl::InternalError(absl::StrCat(rpc, ": unknown exception"));
  }
  if (!status.ok()) LogDebug(absl::StrCat(rpc, " failed: ", status.ToString()));
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// The call's deadline as absl::Time; InfiniteFuture when the client set none (gRPC reports
// gpr_inf_future as a time_point centuries ahead).
absl::Time CallDeadline(const grpc::CallbackServerContext& context) {
  const std::chrono::system_clock::time_point deadline = context.deadline();
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

void FillTensorMetadata(const engine::TensorSpec& spec,
                        inference::ModelMetadataResponse::TensorMetadata* out) {
  out->set_name(spec.name);
  out->set_datatype(std::string(KserveDataType(spec.type.dtype)));
  // An unknown rank has no KServe spelling; it is reported as an empty shape.
  if (spec.type.dims.has_value()) {
    for (int64_t d : *spec.type.dims) out->add_shape(d < 0 ? -1 : d);
  }
}

}  // namespace

// One ModelInfer call. Created by ModelInfer, deletes itself in OnDone (which gRPC calls after
// Finish). Between Start and Finish exactly one thread at a time works on it: the gRPC thread in
// Start, then the worker in Run. OnCancel may run concurrently on a gRPC thread and only sets
// `cancelled_`. Nothing touches `this` after Finish.
class InferenceService::InferCall final : public grpc::ServerUnaryReactor {
 public:
  InferCall(InferenceService* service, grpc::CallbackServerContext* context,
            const inference::ModelInferRequest* request, inference::ModelInferResponse* response)
      : service_(service),
        context_(context),
        request_(request),
        response_(response),
        received_(absl::Now()),
        deadline_(CallDeadline(*context)) {}

  // On the gRPC thread: validate, then queue or answer.
  void Start() {
    absl::Status status;
    try {
      status = Admit();
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat("ModelInfer: ", e.what()));
    } catch (...) {
      status = absl::InternalError("ModelInfer: unknown exception");
    }
    if (!status.ok()) Complete(status);
  }

  void OnCancel() override { cancelled_.store(true, std::memory_order_relaxed); }
  void OnDone() override { delete this; }

 private:
  // OK when the run was handed to a worker (which will answer); otherwise the error to answer.
  absl::Status Admit() {
    if (service_->draining_.load()) {
      return absl::UnavailableError("the server is shutting down");
    }
    LS_ASSIGN_OR_RETURN(
        model_, service_->registry_->Get(request_->model_name(), request_->model_version()));
    absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(*request_, *model_->model);
    if (!decoded.ok()) return Annotate(decoded.status(), Label());
    decoded_ = *std::move(decoded);

    Metrics* metrics = service_->metrics_;
    if (metrics != nullptr) {
      metrics->inflight_requests().Increment();
      metrics->queue_depth().Increment();
    }
    admitted_ = true;
    absl::Status scheduled = service_->pool_->TrySchedule([this] { Run(); });
    if (!scheduled.ok() && metrics != nullptr) metrics->queue_depth().Decrement();
    return scheduled;
  }

  // On a worker thread.
  void Run() {
    absl::Status status;
    try {
      status = Execute();
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat(Label(), e.what()));
    } catch (...) {
      status = absl::InternalError(absl::StrCat(Label(), "unknown exception"));
    }
    Complete(status);
  }

  absl::Status Execute() {
    Metrics* metrics = service_->metrics_;
    if (metrics != nullptr) metrics->queue_depth().Decrement();
    const absl::Time started = absl::Now();
    if (model_->metrics != nullptr) model_->metrics->RecordQueue(started - received_);
    // gRPC also cancels a call whose deadline passed, so the deadline is checked first.
    if (started >= deadline_) {
      return absl::DeadlineExceededError(absl::StrCat(Label(), "deadline passed after ",
                                                      absl::FormatDuration(started - received_),
                                                      " in the queue"));
    }
    if (cancelled_.load(std::memory_order_relaxed)) {
      return absl::CancelledError(absl::StrCat(Label(), "cancelled while queued"));
    }

    engine::RunOptions options;
    options.deadline = deadline_;
    options.cancelled = &cancelled_;
    options.max_loop_iterations = model_->max_loop_iterations;
    if (!model_->model->loop_names().empty()) options.loop_observer = model_->metrics.get();
    engine::RunStats stats;
    absl::StatusOr<std::vector<engine::Value>> outputs =
        model_->model->Run(std::move(decoded_.inputs), options, &stats);
    if (model_->metrics != nullptr) model_->metrics->RecordCompute(absl::Now() - started);
    if (!outputs.ok()) {
      absl::Status status = outputs.status();
      // An expired deadline reaches the engine as gRPC's cancellation (OnCancel) as often as
      // through its own clock check; report what really happened.
      if (absl::IsCancelled(status) && absl::Now() >= deadline_) {
        status =
            absl::DeadlineExceededError(absl::StrCat("deadline exceeded (", status.message(), ")"));
      }
      if (metrics != nullptr && !model_->model->loop_names().empty()) {
        metrics->RecordLoopLimitHit(status.code());
      }
      return Annotate(status, Label());
    }
    LS_RETURN_IF_ERROR(Annotate(
        EncodeInferOutputs(*model_->model, decoded_.outputs, *outputs, response_), Label()));
    response_->set_model_name(model_->name);
    response_->set_model_version(model_->version_string);
    response_->set_id(request_->id());
    return absl::OkStatus();
  }

  // Records the outcome and finishes the call; `this` may be deleted as soon as Finish is called.
  void Complete(const absl::Status& status) {
    if (model_ != nullptr && model_->metrics != nullptr) {
      model_->metrics->RecordRequest(status.code(), absl::Now() - received_);
    }
    if (admitted_ && service_->metrics_ != nullptr) {
      service_->metrics_->inflight_requests().Decrement();
    }
    if (!status.ok() && LogEnabled(LogLevel::kDebug)) {
      LogDebug(absl::StrCat("ModelInfer '", request_->model_name(), "' id '", request_->id(),
                            "': ", status.ToString()));
    }
    Finish(ToGrpcStatus(status));
  }

  std::string Label() const {
    return model_ == nullptr ? std::string()
                             : absl::StrCat("model '", model_->name, "' v", model_->version, ": ");
  }

  InferenceService* const service_;
  grpc::CallbackServerContext* const context_;
  const inference::ModelInferRequest* const request_;
  inference::ModelInferResponse* const response_;
  const absl::Time received_;
  const absl::Time deadline_;
  std::shared_ptr<const LoadedModel> model_;  // pinned until OnDone
  DecodedRequest decoded_;
  bool admitted_ = false;  // counted in loopserve_inflight_requests
  std::atomic<bool> cancelled_{false};
};

InferenceService::InferenceService(const ModelRegistry* registry, WorkerPool* pool,
                                   Metrics* metrics)
    : registry_(registry), pool_(pool), metrics_(metrics) {}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest* request,
                                                       inference::ServerLiveResponse* response) {
  return Answer(context, "ServerLive", [&] {
    response->set_live(true);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest* request,
    inference::ServerReadyResponse* response) {
  return Answer(context, "ServerReady", [&] {
    response->set_ready(!draining_.load());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  return Answer(context, "ModelReady", [&] {
    absl::StatusOr<std::shared_ptr<const LoadedModel>> model =
        registry_->Get(request->name(), request->version());
    if (absl::IsNotFound(model.status())) return model.status();
    response->set_ready(model.ok() && !draining_.load());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest* request,
    inference::ServerMetadataResponse* response) {
  return Answer(context, "ServerMetadata", [&] {
    response->set_name(kServerName);
    response->set_version(kServerVersion);
    // Only Triton extensions served in full are advertised; RepositoryIndex alone is not the
    // "model_repository" extension (load/unload come with hot reload).
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return Answer(context, "ModelMetadata", [&]() -> absl::Status {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model,
                        registry_->Get(request->name(), request->version()));
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> versions, registry_->ReadyVersions(request->name()));
    response->set_name(model->name);
    for (int64_t v : versions) response->add_versions(absl::StrCat(v));
    response->set_platform(model->platform);
    for (const auto& spec : model->model->inputs())
      FillTensorMetadata(spec, response->add_inputs());
    for (const auto& spec : model->model->outputs()) {
      FillTensorMetadata(spec, response->add_outputs());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  auto* call = new InferCall(this, context, request, response);
  call->Start();
  return call;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return Answer(context, "RepositoryIndex", [&] {
    for (const ModelRegistry::ModelState& model : registry_->Index()) {
      if (model.versions.empty() && !request->ready()) {
        auto* entry = response->add_models();
        entry->set_name(model.name);
        entry->set_state("UNAVAILABLE");
        entry->set_reason(model.reason);
      }
      for (const ModelRegistry::VersionState& version : model.versions) {
        if (request->ready() && !version.ready) continue;
        auto* entry = response->add_models();
        entry->set_name(model.name);
        entry->set_version(absl::StrCat(version.version));
        entry->set_state(version.ready ? "READY" : "UNAVAILABLE");
        entry->set_reason(version.reason);
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace loopserve::server
