#include "client/client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace loopserve::client {
namespace {

// Sets the earlier of `options.deadline` and now + `options.timeout` (if finite) on `context`.
void ApplyDeadline(const InferOptions& options, grpc::ClientContext* context) {
  absl::Time deadline = options.deadline;
  if (options.timeout != absl::InfiniteDuration()) {
    deadline = std::min(deadline, absl::Now() + options.timeout);
  }
  if (deadline == absl::InfiniteFuture()) return;
  context->set_deadline(absl::ToChronoTime(deadline));
}

// Options for the calls other than inference: a bounded wait, so a hung server cannot block
// `loopctl live` (a probe) forever.
InferOptions ControlCallOptions() {
  InferOptions options;
  options.timeout = absl::Seconds(30);
  return options;
}

}  // namespace

template <typename Call>
absl::Status Client::RunCall(const InferOptions& options, Call&& call) {
  grpc::ClientContext context;
  ApplyDeadline(options, &context);
  if (options.cancel != nullptr && !options.cancel->Attach(&context)) {
    return absl::CancelledError("call cancelled before it started");
  }
  grpc::Status status = call(&context);
  if (options.cancel != nullptr) options.cancel->Detach();
  return FromGrpcStatus(status);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void CancelToken::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

bool CancelToken::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool CancelToken::WaitForStart(absl::Duration timeout) const {
  return started_.WaitForNotificationWithTimeout(timeout);
}

bool CancelToken::Attach(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  context_ = context;
  if (!started_.HasBeenNotified()) started_.Notify();
  return true;
}

void CancelToken::Detach() {
  absl::MutexLock lock(&mu_);
  context_ = nullptr;
}

const Tensor* InferResult::Find(absl::string_view name) const {
  for (const Tensor& t : outputs) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<Protocol> ParseProtocol(absl::string_view name) {
  if (name == "grpc") return Protocol::kGrpc;
  if (name == "http") return Protocol::kHttp;
  return absl::InvalidArgumentError(
      absl::StrCat("protocol '", name, "' is neither 'grpc' nor 'http'"));
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(absl::string_view address,
                                                       Protocol protocol) {
  if (address.empty() || address.find(':') == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("server address '", address, "' is not HOST:PORT"));
  }
  if (protocol == Protocol::kHttp) {
    std::unique_ptr<Client> client(new Client(std::string(address), nullptr));
    client->http_ = std::make_unique<HttpClient>(address);
    return client;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // outputs of long loops can be large
  args.SetMaxSendMessageSize(-1);
  auto channel =
      grpc::CreateCustomChannel(std::string(address), grpc::InsecureChannelCredentials(), args);
  return std::unique_ptr<Client>(new Client(std::string(address), std::move(channel)));
}

Client::Client(std::string address, std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)),
      channel_(std::move(channel)),
      stub_(channel_ == nullptr ? nullptr : inference::GRPCInferenceService::NewStub(channel_)),
      health_stub_(channel_ == nullptr ? nullptr : grpc::health::v1::Health::NewStub(channel_)) {}

absl::StatusOr<bool> Client::ServerLive() {
  if (http_ != nullptr) return http_->ServerLive();
  inference::ServerLiveRequest request;
  inference::ServerLiveResponse response;
  absl::Status status = RunCall(ControlCallOptions(), [&](grpc::ClientContext* context) {
    return stub_->ServerLive(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.live();
}

absl::StatusOr<bool> Client::ServerReady() {
  if (http_ != nullptr) return http_->ServerReady();
  inference::ServerReadyRequest request;
  inference::ServerReadyResponse response;
  absl::Status status = RunCall(ControlCallOptions(), [&](grpc::ClientContext* context) {
    return stub_->ServerReady(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.ready();
}

absl::StatusOr<bool> Client::ModelReady(absl::string_view model, absl::string_view version) {
  if (http_ != nullptr) return http_->ModelReady(model, version);
  inference::ModelReadyRequest request;
  request.set_name(std::string(model));
  request.set_version(std::string(version));
  inference::ModelReadyResponse response;
  absl::Status status = RunCall(ControlCallOptions(), [&](grpc::ClientContext* context) {
    return stub_->ModelReady(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.ready();
}

absl::StatusOr<inference::ServerMetadataResponse> Client::ServerMetadata() {
  if (http_ != nullptr) return http_->ServerMetadata();
  inference::ServerMetadataRequest request;
  inference::ServerMetadataResponse response;
  absl::Status status = RunCall(ControlCallOptions(), [&](grpc::ClientContext* context) {
    return stub_->ServerMetadata(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<inference::ModelMetadataResponse> Client::ModelMetadata(absl::string_view model,
                                                                       absl::string_view version) {
  if (http_ != nullptr) return http_->ModelMetadata(model, version);
  inference::ModelMetadataRequest request;
  request.set_name(std::string(model));
  request.set_version(std::string(version));
  inference::ModelMetadataResponse response;
  absl::Status status = RunCall(ControlCallOptions(), [&](grpc::ClientContext* context) {
    return stub_->ModelMetadata(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<inference::ModelConfig> Client::ModelConfig(absl::string_view model,
                                                           absl::string_view version) {
  if (http_ != nullptr) return http_->ModelConfig(model, version);
  inference::ModelConfigRequest request;
  request.set_name(std::string(model));
  request.set_version(std::string(version));
  inference::ModelConfigResponse response;
  absl::Status status = RunCall(ControlCallOptions(), [&](grpc::ClientContext* context) {
    return stub_->ModelConfig(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.config();
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Client::HealthCheck(
    absl::string_view service) {
  if (http_ != nullptr) return absl::UnimplementedError("HealthCheck is gRPC only");
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(std::string(service));
  grpc::health::v1::HealthCheckResponse response;
  absl::Status status = RunCall(ControlCallOptions(), [&](grpc::ClientContext* context) {
    return health_stub_->Check(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.status();
}

absl::StatusOr<InferResult> Client::Infer(absl::string_view model,
                                          const std::vector<Tensor>& inputs,
                                          const std::vector<std::string>& outputs,
                                          const InferOptions& options) {
  if (http_ != nullptr) return http_->Infer(model, inputs, outputs, options);
  inference::ModelInferRequest request;
  request.set_model_name(std::string(model));
  request.set_model_version(options.model_version);
  request.set_id(options.request_id);
  if (options.sequence_id != 0 || !options.sequence_string_id.empty()) {
    auto& parameters = *request.mutable_parameters();
    if (options.sequence_string_id.empty()) {
      parameters["sequence_id"].set_uint64_param(options.sequence_id);
    } else {
      parameters["sequence_id"].set_string_param(options.sequence_string_id);
    }
    parameters["sequence_start"].set_bool_param(options.sequence_start);
    parameters["sequence_end"].set_bool_param(options.sequence_end);
  }
  for (const Tensor& input : inputs) {
    absl::Status added = AddInput(input, options.contents, &request);
    if (!added.ok()) return added;
  }
  for (const std::string& name : outputs) request.add_outputs()->set_name(name);

  absl::StatusOr<inference::ModelInferResponse> response = InferRaw(request, options);
  if (!response.ok()) return response.status();
  absl::StatusOr<std::vector<Tensor>> decoded = DecodeOutputs(*response);
  if (!decoded.ok()) {
    return absl::InternalError(
        absl::StrCat("model '", model, "': malformed response: ", decoded.status().message()));
  }
  InferResult result;
  result.model_name = response->model_name();
  result.model_version = response->model_version();
  result.id = response->id();
  result.outputs = *std::move(decoded);
  return result;
}

absl::StatusOr<InferResult> Client::StreamInfer(
    absl::string_view model, const std::vector<Tensor>& inputs,
    const std::vector<std::string>& outputs, const InferOptions& options,
    absl::FunctionRef<void(int64_t iteration, const std::vector<Tensor>& slices)> on_slice) {
  if (http_ != nullptr) return absl::UnimplementedError("--stream needs gRPC (ModelStreamInfer)");
  inference::ModelInferRequest request;
  request.set_model_name(std::string(model));
  request.set_model_version(options.model_version);
  request.set_id(options.request_id);
  for (const Tensor& input : inputs) {
    absl::Status added = AddInput(input, options.contents, &request);
    if (!added.ok()) return added;
  }
  for (const std::string& name : outputs) request.add_outputs()->set_name(name);
  (*request.mutable_parameters())["stream_iterations"].set_bool_param(true);

  InferResult result;
  absl::Status failed;
  bool finished = false;
  absl::Status status = RunCall(options, [&](grpc::ClientContext* context) {
    auto stream = stub_->ModelStreamInfer(context);
    if (stream->Write(request)) stream->WritesDone();
    inference::ModelStreamInferResponse message;
    while (stream->Read(&message)) {
      const inference::ModelInferResponse& response = message.infer_response();
      if (!message.error_message().empty()) {
        failed = absl::UnknownError(message.error_message());
        continue;
      }
      absl::StatusOr<std::vector<Tensor>> decoded = DecodeOutputs(response);
      if (!decoded.ok()) {
        failed = absl::InternalError(
            absl::StrCat("model '", model, "': malformed response: ", decoded.status().message()));
        continue;
      }
      auto final_flag = response.parameters().find("triton_final_response");
      if (final_flag != response.parameters().end() && !final_flag->second.bool_param()) {
        auto iteration = response.parameters().find("iteration");
        on_slice(iteration == response.parameters().end() ? -1 : iteration->second.int64_param(),
                 *decoded);
        continue;
      }
      result.model_name = response.model_name();
      result.model_version = response.model_version();
      result.id = response.id();
      result.outputs = *std::move(decoded);
      finished = true;
    }
    return stream->Finish();
  });
  if (!status.ok()) return status;
  if (!failed.ok()) return failed;
  if (!finished) return absl::InternalError("the stream ended without a final response");
  return result;
}

absl::StatusOr<inference::ModelInferResponse> Client::InferRaw(
    const inference::ModelInferRequest& request, const InferOptions& options) {
  if (http_ != nullptr) return absl::UnimplementedError("InferRaw sends gRPC messages");
  inference::ModelInferResponse response;
  absl::Status status = RunCall(options, [&](grpc::ClientContext* context) {
    return stub_->ModelInfer(context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::Status Client::WaitForReady(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::UnavailableError("server never answered");
  absl::Duration backoff = absl::Milliseconds(10);
  while (true) {
    // Each attempt waits for the channel to connect, but never past the overall deadline.
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Seconds(1))));
    context.set_wait_for_ready(true);
    inference::ServerReadyRequest request;
    inference::ServerReadyResponse response;
    last = FromGrpcStatus(stub_->ServerReady(&context, request, &response));
    if (last.ok() && response.ready()) return absl::OkStatus();
    if (last.ok()) last = absl::UnavailableError("server is live but not ready");
    if (absl::Now() + backoff >= deadline) break;
    absl::SleepFor(backoff);  // polling with a bounded overall timeout
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  }
  return absl::Status(last.code(),
                      absl::StrCat("server at ", address_, " not ready after ",
                                   absl::FormatDuration(timeout), ": ", last.message()));
}

}  // namespace loopserve::client
