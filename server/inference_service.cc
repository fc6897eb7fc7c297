#include "server/inference_service.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/base/status_macros.h"
#include "grpcpp/support/proto_buffer_writer.h"
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

// How early gRPC may cancel a call for its deadline, by our clock (see Execute).
constexpr absl::Duration kDeadlineClockSlack = absl::Milliseconds(20);

// The call's deadline as absl::Time; InfiniteFuture when the client set none (gRPC reports
// gpr_inf_future as a time_point centuries ahead).
absl::Time CallDeadline(const grpc::CallbackServerContext& context) {
  const std::chrono::system_clock::time_point deadline = context.deadline();
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

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

}  // namespace

// One ModelInfer call. Created by ModelInfer. A call answered inside the handler (an error, or a
// run on the gRPC thread) answers through the context's default reactor, whose completion gRPC
// handles without a thread hop, and is deleted by Start; a queued call is its own reactor, so
// that OnCancel reaches the running engine, and deletes itself in OnDone (which gRPC calls after
// Finish). Between Start and Finish exactly one thread at a time works on it: the gRPC thread in
// Start, then the worker in Run (or the gRPC thread runs it too, inside Start). OnCancel,
// InferenceService::CancelAll and the inline-run watcher (PollCancelled) may run concurrently
// and only set `cancelled_`; the service's list of calls, under its mutex, keeps the call alive
// for them. Nothing touches a queued call after Finish.
class InferenceService::InferCall final : public grpc::ServerUnaryReactor {
 public:
  InferCall(InferenceService* service, grpc::CallbackServerContext* context,
            const grpc::ByteBuffer* request_bytes, grpc::ByteBuffer* response_bytes)
      : service_(service),
        context_(context),
        request_bytes_(request_bytes),
        response_bytes_(response_bytes),
        received_(absl::Now()),
        deadline_(CallDeadline(*context)) {
    service_->CallStarted(this);
  }
  ~InferCall() override {
    service_->CallFinished(this);
    if (request_size_ >= kTrimAfterRequestBytes) {
      // The request's buffers were freed above; give their pages back (glibc keeps freed small
      // blocks of a large message in its arenas otherwise).
      request_ = inference::ModelInferRequest();
      decoded_ = DecodedRequest();
      malloc_trim(0);
    }
  }

  // On the gRPC thread: validate, then run here, queue or answer an error. Returns the reactor
  // for gRPC: `this` when queued; otherwise the default reactor, and `this` is deleted.
  grpc::ServerUnaryReactor* Start() {
    absl::Status status;
    try {
      status = Admit();
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat("ModelInfer: ", e.what()));
    } catch (...) {
      status = absl::InternalError("ModelInfer: unknown exception");
    }
    if (status.ok() && !answer_here_) return this;  // a worker answers
    if (!status.ok()) {
      answer_here_ = true;
      Complete(status);
    }
    grpc::ServerUnaryReactor* reactor = default_reactor_;
    delete this;
    return reactor;
  }

  void OnCancel() override { Cancel(); }
  void OnDone() override { delete this; }

  // Sets the cancellation flag; any thread.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }

  // Called by the watcher, under the service's mutex, while this call runs on a gRPC thread.
  void PollCancelled() {
    if (context_->IsCancelled()) Cancel();
  }

  // The service's intrusive list of calls in flight (guarded by its calls_mutex_).
  InferCall* prev_ = nullptr;
  InferCall* next_ = nullptr;
  bool running_inline_ = false;

 private:
  // Parses the raw request body and lets go of it. INVALID_ARGUMENT for bytes that are not a
  // ModelInferRequest.
  absl::Status Parse() {
    auto* bytes = const_cast<grpc::ByteBuffer*>(request_bytes_);  // ours until the call ends
    request_size_ = bytes->Valid() ? bytes->Length() : 0;
    return ParseInferRequest(*bytes, &request_);
  }

  // OK when the call was run here (answered) or handed to a worker (which will answer);
  // otherwise the error to answer.
  absl::Status Admit() {
    if (service_->draining_.load()) {
      return absl::UnavailableError("the server is shutting down");
    }
    LS_RETURN_IF_ERROR(Parse());
    LS_ASSIGN_OR_RETURN(model_,
                        service_->registry_->Get(request_.model_name(), request_.model_version()));
    LS_RETURN_IF_ERROR(ApplyTimeoutParameter());
    const absl::Time decode_start = absl::Now();
    absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(request_, *model_->model);
    // The config's dims (batch dim, narrower dims) and reshapes.
    absl::Status adapted =
        decoded.ok() ? model_->io.AdaptInputs(decoded->inputs) : decoded.status();
    model_->metrics->RecordComputeInput(absl::Now() - decode_start);
    if (!adapted.ok()) return Annotate(adapted, Label());
    decoded_ = *std::move(decoded);

    Metrics* metrics = service_->metrics_;
    admitted_ = true;
    if (model_->metrics->RecentCompute() < service_->options_.inline_run_limit &&
        service_->pool_->TryRunHere(
            [this, metrics] {
              answer_here_ = true;
              if (metrics != nullptr) metrics->inflight_requests().Increment();
              service_->SetRunningInline(this, true);
              Run();
              service_->SetRunningInline(this, false);
            },
            model_->instances)) {
      return absl::OkStatus();
    }
    // Queued before in flight: a request seen in flight and not queued is running.
    queued_ = true;
    if (metrics != nullptr) {
      metrics->queue_depth().Increment();
      metrics->inflight_requests().Increment();
    }
    absl::Status scheduled = service_->pool_->TrySchedule([this] { Run(); }, model_->instances);
    if (!scheduled.ok()) {
      queued_ = false;
      if (metrics != nullptr) metrics->queue_depth().Decrement();
    }
    return scheduled;
  }

  // Triton's per-request `timeout` parameter (microseconds; 0 = none): the earlier of it and the
  // gRPC deadline applies.
  absl::Status ApplyTimeoutParameter() {
    auto it = request_.parameters().find("timeout");
    if (it == request_.parameters().end()) return absl::OkStatus();
    const inference::InferParameter& p = it->second;
    int64_t micros = -1;
    if (p.parameter_choice_case() == inference::InferParameter::kInt64Param) {
      micros = p.int64_param();
    } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      micros = static_cast<int64_t>(
          std::min<uint64_t>(p.uint64_param(), std::numeric_limits<int64_t>::max()));
    }
    if (micros < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Label(), "parameter 'timeout' must be a non-negative int64 (microseconds)"));
    }
    if (micros > 0) deadline_ = std::min(deadline_, received_ + absl::Microseconds(micros));
    return absl::OkStatus();
  }

  // On a worker thread, or on the gRPC thread in Start (see TryRunHere).
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
    if (metrics != nullptr && queued_) metrics->queue_depth().Decrement();
    const absl::Time started = absl::Now();
    model_->metrics->RecordQueue(started - received_);
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
    options.max_output_bytes = model_->max_output_bytes;
    options.max_memory_bytes = model_->max_request_memory_bytes;
    if (!model_->model->loop_names().empty()) options.loop_observer = model_->metrics.get();
    engine::RunStats stats;
    absl::StatusOr<std::vector<engine::Value>> outputs =
        model_->model->Run(std::move(decoded_.inputs), options, &stats);
    model_->metrics->RecordCompute(absl::Now() - started);
    if (!outputs.ok()) {
      absl::Status status = outputs.status();
      // An expired deadline reaches the engine as gRPC's cancellation (OnCancel) as often as
      // through its own clock check; report what really happened. gRPC times the deadline on its
      // own millisecond clock, which its cancellation showed up to ~10 ms ahead of absl::Now().
      if (absl::IsCancelled(status) && absl::Now() + kDeadlineClockSlack >= deadline_) {
        status =
            absl::DeadlineExceededError(absl::StrCat("deadline exceeded (", status.message(), ")"));
      }
      const engine::LimitReason reason = engine::GetLimitReason(status);
      if (metrics != nullptr && reason == engine::LimitReason::kMemory) {
        metrics->RecordLimitHit(LimitReason::kMemory);  // any model may run out of its budget
      } else if (metrics != nullptr && !model_->model->loop_names().empty()) {
        // The engine tags the limit it enforced; deadline and cancellation are their own codes.
        switch (reason) {
          case engine::LimitReason::kIterationCap:
            metrics->RecordLimitHit(LimitReason::kIterationCap);
            break;
          case engine::LimitReason::kOutputBytes:
            metrics->RecordLimitHit(LimitReason::kOutputBytes);
            break;
          case engine::LimitReason::kMemory:
            metrics->RecordLimitHit(LimitReason::kMemory);
            break;
          case engine::LimitReason::kNone:
            metrics->RecordLoopLimitHit(status.code());
            break;
        }
      }
      return Annotate(status, Label());
    }
    LS_RETURN_IF_ERROR(CheckOutputBytes(*outputs));
    LS_RETURN_IF_ERROR(Annotate(model_->io.AdaptOutputs(*outputs), Label()));
    const absl::Time encode_start = absl::Now();
    absl::Status encoded =
        EncodeInferOutputs(*model_->model, decoded_.outputs, *outputs, &response_);
    outputs->clear();
    LS_RETURN_IF_ERROR(Annotate(encoded, Label()));
    response_.set_model_name(model_->name);
    response_.set_model_version(model_->version_string);
    response_.set_id(request_.id());
    bool own_buffer = false;
    const grpc::Status serialized =
        grpc::SerializationTraits<inference::ModelInferResponse>::Serialize(
            response_, response_bytes_, &own_buffer);
    inference::ModelInferResponse().Swap(&response_);  // frees the copy now in the byte buffer
    model_->metrics->RecordComputeOutput(absl::Now() - encode_start);
    if (!serialized.ok()) {
      return absl::InternalError(
          absl::StrCat(Label(), "cannot serialize the response: ", serialized.error_message()));
    }
    return absl::OkStatus();
  }

  // The output-bytes cap on the final outputs (the engine caps Loop scan outputs as they grow).
  absl::Status CheckOutputBytes(const std::vector<engine::Value>& outputs) const {
    const int64_t cap = model_->max_output_bytes;
    if (cap <= 0) return absl::OkStatus();
    uint64_t total = 0;
    for (const engine::Value& value : outputs) {
      if (value.is_tensor()) total += value.tensor().ByteSize();
    }
    if (total <= static_cast<uint64_t>(cap)) return absl::OkStatus();
    if (service_->metrics_ != nullptr)
      service_->metrics_->RecordLimitHit(LimitReason::kOutputBytes);
    return absl::ResourceExhaustedError(absl::StrCat(Label(), "the outputs hold ", total,
                                                     " bytes, more than the cap of ", cap,
                                                     " bytes (max_output_bytes)"));
  }

  // Records the outcome and finishes the call; a queued call may be deleted as soon as Finish is
  // called.
  void Complete(const absl::Status& status) {
    if (model_ != nullptr) {  // null when the model lookup failed
      model_->metrics->RecordRequest(status.code(), absl::Now() - received_);
    }
    if (admitted_ && service_->metrics_ != nullptr) {
      service_->metrics_->inflight_requests().Decrement();
    }
    if (!status.ok() && LogEnabled(LogLevel::kDebug)) {
      LogDebug(absl::StrCat("ModelInfer ", QuoteUntrusted(request_.model_name()), " id ",
                            QuoteUntrusted(request_.id()), ": ", status.ToString()));
    }
    if (answer_here_) {
      default_reactor_ = context_->DefaultReactor();
      default_reactor_->Finish(ToGrpcStatus(status));
    } else {
      Finish(ToGrpcStatus(status));  // `this` may be deleted from here on
    }
  }

  std::string Label() const {
    return model_ == nullptr ? std::string()
                             : absl::StrCat("model '", model_->name, "' v", model_->version, ": ");
  }

  InferenceService* const service_;
  grpc::CallbackServerContext* const context_;
  const grpc::ByteBuffer* const request_bytes_;  // emptied by Parse
  grpc::ByteBuffer* const response_bytes_;
  size_t request_size_ = 0;  // serialized bytes
  inference::ModelInferRequest request_;
  inference::ModelInferResponse response_;
  const absl::Time received_;
  absl::Time deadline_;  // the gRPC deadline, or the `timeout` parameter when earlier
  std::shared_ptr<const LoadedModel> model_;  // pinned until OnDone
  DecodedRequest decoded_;
  bool admitted_ = false;     // counted in loopserve_inflight_requests
  bool queued_ = false;       // counted in loopserve_queue_depth until a worker takes it
  bool answer_here_ = false;  // answered inside Start, through the default reactor
  grpc::ServerUnaryReactor* default_reactor_ = nullptr;  // set when answered here
  std::atomic<bool> cancelled_{false};
};

InferenceService::InferenceService(ModelRegistry* registry, WorkerPool* pool, Metrics* metrics,
                                   Options options)
    : registry_(registry),
      pool_(pool),
      metrics_(metrics),
      options_(options),
      loader_(/*num_workers=*/1, /*max_queue_size=*/16) {
  watcher_ = std::thread([this] { WatchInlineRuns(); });
}

InferenceService::~InferenceService() {
  {
    absl::MutexLock lock(&calls_mutex_);
    stop_watcher_ = true;
  }
  watcher_.join();
  loader_.Shutdown();
}

void InferenceService::CallStarted(InferCall* call) {
  absl::MutexLock lock(&calls_mutex_);
  ++calls_in_flight_;
  call->next_ = calls_;
  if (calls_ != nullptr) calls_->prev_ = call;
  calls_ = call;
  if (cancel_all_) call->Cancel();
}

void InferenceService::CallFinished(InferCall* call) {
  absl::MutexLock lock(&calls_mutex_);
  --calls_in_flight_;
  if (call->prev_ != nullptr) {
    call->prev_->next_ = call->next_;
  } else {
    calls_ = call->next_;
  }
  if (call->next_ != nullptr) call->next_->prev_ = call->prev_;
}

void InferenceService::SetRunningInline(InferCall* call, bool running) {
  absl::MutexLock lock(&calls_mutex_);
  call->running_inline_ = running;
  inline_runs_ += running ? 1 : -1;
}

void InferenceService::CancelAll() {
  absl::MutexLock lock(&calls_mutex_);
  cancel_all_ = true;
  for (InferCall* call = calls_; call != nullptr; call = call->next_) call->Cancel();
}

void InferenceService::WatchInlineRuns() {
  absl::MutexLock lock(&calls_mutex_);
  auto busy_or_stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls_mutex_) {
    return inline_runs_ > 0 || stop_watcher_;
  };
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls_mutex_) { return stop_watcher_; };
  while (true) {
    calls_mutex_.Await(absl::Condition(&busy_or_stopping));
    if (stop_watcher_) return;
    for (InferCall* call = calls_; call != nullptr; call = call->next_) {
      if (call->running_inline_) call->PollCancelled();
    }
    if (calls_mutex_.AwaitWithTimeout(absl::Condition(&stopping), kInlineCancelPollInterval)) {
      return;
    }
  }
}

bool InferenceService::WaitForIdle(absl::Time deadline) {
  absl::MutexLock lock(&calls_mutex_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls_mutex_) { return calls_in_flight_ == 0; };
  return calls_mutex_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

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
    // The Triton extensions served in full.
    response->add_extensions("model_repository");
    response->add_extensions("model_configuration");
    response->add_extensions("statistics");
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
    for (const ModelIo::Tensor& input : model->io.inputs()) {
      FillTensorMetadata(input, response->add_inputs());
    }
    for (const ModelIo::Tensor& output : model->io.outputs()) {
      FillTensorMetadata(output, response->add_outputs());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return Answer(context, "ModelConfig", [&]() -> absl::Status {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model,
                        registry_->Get(request->name(), request->version()));
    *response->mutable_config() = model->config;
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return (new InferCall(this, context, request, response))->Start();
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

grpc::ServerUnaryReactor* InferenceService::RunRepositoryChange(
    grpc::CallbackServerContext* context, absl::string_view rpc, const std::string& repository_name,
    std::function<absl::Status()> change) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status;
  if (!options_.model_control) {
    status = absl::FailedPreconditionError(absl::StrCat(
        rpc, " needs explicit model control (--model_control_mode=explicit); this server ",
        "picks up repository changes by itself or not at all"));
  } else if (!repository_name.empty()) {
    status =
        absl::InvalidArgumentError("loopserve has one repository: leave repository_name empty");
  } else {
    // Loads take seconds: they run on the loader thread, which finishes the call.
    status = loader_.TrySchedule([reactor, rpc = std::string(rpc), change = std::move(change)] {
      absl::Status result;
      try {
        result = change();
      } catch (const std::exception& e) {
        result = absl::InternalError(absl::StrCat(rpc, ": ", e.what()));
      }
      if (!result.ok()) LogDebug(absl::StrCat(rpc, " failed: ", result.ToString()));
      reactor->Finish(ToGrpcStatus(result));
    });
    if (status.ok()) return reactor;
  }
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse* response) {
  if (!request->parameters().empty()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(
        "RepositoryModelLoad: parameters (config or file overrides) are not supported; edit "
        "config.pbtxt and the version folders in the repository")));
    return reactor;
  }
  const std::string name = request->model_name();
  return RunRepositoryChange(context, "RepositoryModelLoad", request->repository_name(),
                             [this, name] { return registry_->Load(name); });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse* response) {
  const std::string name = request->model_name();
  return RunRepositoryChange(context, "RepositoryModelUnload", request->repository_name(),
                             [this, name] { return registry_->Unload(name); });
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Answer(context, "ModelStatistics", [&]() -> absl::Status {
    std::vector<std::shared_ptr<const LoadedModel>> models;
    if (request->name().empty()) {
      if (!request->version().empty()) {
        return absl::InvalidArgumentError("ModelStatistics: a version needs a model name");
      }
      models = registry_->ReadyModels();
    } else if (request->version().empty()) {
      LS_ASSIGN_OR_RETURN(std::vector<int64_t> versions, registry_->ReadyVersions(request->name()));
      for (int64_t v : versions) {
        absl::StatusOr<std::shared_ptr<const LoadedModel>> model =
            registry_->Get(request->name(), absl::StrCat(v));
        if (model.ok()) models.push_back(*std::move(model));  // unloaded meanwhile: skipped
      }
    } else {
      LS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> model,
                          registry_->Get(request->name(), request->version()));
      models.push_back(std::move(model));
    }
    auto fill = [](const ModelVersionStatistics::Duration& d, inference::StatisticDuration* out) {
      out->set_count(d.count);
      out->set_ns(d.ns);
    };
    for (const std::shared_ptr<const LoadedModel>& model : models) {
      const ModelVersionStatistics stats = model->metrics->Statistics();
      inference::ModelStatistics* out = response->add_model_stats();
      out->set_name(model->name);
      out->set_version(model->version_string);
      out->set_last_inference(stats.last_inference_ms);
      out->set_inference_count(stats.inference_count);
      out->set_execution_count(stats.inference_count);  // no batching: one execution per request
      inference::InferStatistics* infer = out->mutable_inference_stats();
      fill(stats.success, infer->mutable_success());
      fill(stats.fail, infer->mutable_fail());
      fill(stats.queue, infer->mutable_queue());
      fill(stats.compute_input, infer->mutable_compute_input());
      fill(stats.compute_infer, infer->mutable_compute_infer());
      fill(stats.compute_output, infer->mutable_compute_output());
      for (const ModelVersionStatistics::Loop& loop : stats.loops) {
        inference::LoopStatistics* l = out->add_loop_stats();
        l->set_name(loop.name);
        fill(loop.execution, l->mutable_execution());
        l->set_iteration_count(loop.iterations);
        l->set_ns_per_iteration(loop.iterations > 0 ? loop.execution.ns / loop.iterations : 0);
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace loopserve::server
