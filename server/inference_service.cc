#include "server/inference_service.h"

#include <malloc.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/base/status_macros.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "server/logging.h"
#include "server/status_util.h"
#include "server/tensor_codec.h"

namespace loopserve::server {
namespace {

// Runs `body` (which fills the response) and finishes the call with its status.
template <typename Body>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, absl::string_view rpc,
                                 Body&& body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = CatchExceptions(absl::StrCat(rpc, ": "), body);
  if (!status.ok()) LogDebug(absl::StrCat(rpc, " failed: ", status.ToString()));
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// Copies a StatusOr's value into the response (the gRPC adapter's half of a ServerApi answer).
template <typename T>
absl::Status CopyTo(absl::StatusOr<T> answer, T* response) {
  if (!answer.ok()) return answer.status();
  *response = *std::move(answer);
  return absl::OkStatus();
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

}  // namespace

// One ModelInfer call: the InferenceCall the runner takes through the request path, and for a
// queued request the call's reactor too. Created by ModelInfer on the gRPC thread; answered
// inside the handler (Finish on the handler's thread: through the default reactor, and Start
// deletes it) or later by a worker (through this reactor; deleted in OnDone, which gRPC calls
// after Finish and never before ModelInfer has returned it).
class InferenceService::InferCall final : public InferenceCall, public grpc::ServerUnaryReactor {
 public:
  InferCall(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
            grpc::ByteBuffer* response_bytes)
      : InferenceCall(Protocol::kGrpc, Polling::kWhileInline, absl::Now(), CallDeadline(*context)),
        context_(context),
        request_bytes_(request_bytes),
        response_bytes_(response_bytes),
        handler_thread_(std::this_thread::get_id()) {}
  ~InferCall() override {
    if (request_size_ >= kTrimAfterRequestBytes) {
      // Give the pages of the request's buffers back (glibc keeps freed small blocks of a large
      // message in its arenas otherwise).
      request_ = inference::ModelInferRequest();
      request.inputs.clear();
      malloc_trim(0);
    }
  }

  // On the gRPC thread. Returns the reactor for gRPC: `this` when a worker will answer,
  // otherwise the default reactor (and `this` is deleted).
  grpc::ServerUnaryReactor* Start(InferenceRunner* runner) {
    const absl::Status parsed = CatchExceptions("ModelInfer: ", [this] { return Parse(); });
    if (!parsed.ok()) {
      Finish(parsed);  // no model named yet: nothing for the runner to record
    } else {
      request.error = ToInferenceRequest(request_, &request);
      runner->Submit(this);
    }
    if (!answered_here_) return this;
    grpc::ServerUnaryReactor* reactor = default_reactor_;
    delete this;
    return reactor;
  }

  void OnCancel() override { Cancel(); }
  void OnDone() override { delete this; }

 protected:
  absl::Status Respond(const LoadedModel& model, const std::vector<int>& outputs,
                       std::vector<engine::Value>& values) override {
    inference::ModelInferResponse response;
    LS_RETURN_IF_ERROR(EncodeInferOutputs(*model.model, outputs, values, &response));
    values.clear();
    response.set_model_name(model.name);
    response.set_model_version(model.version_string);
    response.set_id(request_.id());
    bool own_buffer = false;
    const grpc::Status serialized =
        grpc::SerializationTraits<inference::ModelInferResponse>::Serialize(
            response, response_bytes_, &own_buffer);
    if (!serialized.ok()) {
      return absl::InternalError(
          absl::StrCat("cannot serialize the response: ", serialized.error_message()));
    }
    return absl::OkStatus();
  }

  void Finish(const absl::Status& status) override {
    if (std::this_thread::get_id() == handler_thread_) {
      answered_here_ = true;
      default_reactor_ = context_->DefaultReactor();
      default_reactor_->Finish(ToGrpcStatus(status));
    } else {
      grpc::ServerUnaryReactor::Finish(ToGrpcStatus(status));  // `this` may be deleted now
    }
  }

  bool ClientGone() override { return context_->IsCancelled(); }

 private:
  // Parses the raw request body and lets go of it. INVALID_ARGUMENT for bytes that are not a
  // ModelInferRequest.
  absl::Status Parse() {
    auto* bytes = const_cast<grpc::ByteBuffer*>(request_bytes_);  // ours until the call ends
    request_size_ = bytes->Valid() ? bytes->Length() : 0;
    return ParseInferRequest(*bytes, &request_);
  }

  grpc::CallbackServerContext* const context_;
  const grpc::ByteBuffer* const request_bytes_;  // emptied by Parse
  grpc::ByteBuffer* const response_bytes_;
  const std::thread::id handler_thread_;  // Finish there answers through the default reactor
  size_t request_size_ = 0;               // serialized bytes
  inference::ModelInferRequest request_;  // raw inputs are views of it until Finish
  bool answered_here_ = false;            // written only on the handler's thread
  grpc::ServerUnaryReactor* default_reactor_ = nullptr;
};

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return (new InferCall(context, request, response))->Start(runner_);
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
    response->set_ready(api_->ServerReady());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  return Answer(context, "ModelReady", [&]() -> absl::Status {
    LS_ASSIGN_OR_RETURN(bool ready, api_->ModelReady(request->name(), request->version()));
    response->set_ready(ready);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest* request,
    inference::ServerMetadataResponse* response) {
  return Answer(context, "ServerMetadata", [&] {
    *response = api_->ServerMetadata();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return Answer(context, "ModelMetadata", [&] {
    return CopyTo(api_->ModelMetadata(request->name(), request->version()), response);
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return Answer(context, "ModelConfig", [&] {
    return CopyTo(api_->ModelConfig(request->name(), request->version()),
                  response->mutable_config());
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return Answer(context, "RepositoryIndex", [&] {
    *response = api_->RepositoryIndex(request->ready());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Answer(context, "ModelStatistics", [&] {
    return CopyTo(api_->ModelStatistics(request->name(), request->version()), response);
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryChange(
    grpc::CallbackServerContext* context, absl::string_view rpc,
    absl::FunctionRef<absl::Status(ServerApi::Done done)> schedule) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The loader thread finishes the call when the change is done.
  const absl::Status scheduled = CatchExceptions(absl::StrCat(rpc, ": "), [&] {
    return schedule(
        [reactor](const absl::Status& result) { reactor->Finish(ToGrpcStatus(result)); });
  });
  if (!scheduled.ok()) reactor->Finish(ToGrpcStatus(scheduled));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse* response) {
  return RepositoryChange(context, "RepositoryModelLoad", [&](ServerApi::Done done) {
    return api_->Load("RepositoryModelLoad", request->repository_name(), request->model_name(),
                      !request->parameters().empty(), std::move(done));
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse* response) {
  return RepositoryChange(context, "RepositoryModelUnload", [&](ServerApi::Done done) {
    return api_->Unload("RepositoryModelUnload", request->repository_name(), request->model_name(),
                        std::move(done));
  });
}

}  // namespace loopserve::server
