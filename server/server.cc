#include "server/server.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/logging.h"

namespace loopserve::server {
namespace {

// Requests carry whole tensors: allow messages up to 1 GiB (gRPC's default is 4 MiB).
constexpr int kMaxMessageBytes = 1 << 30;

std::string HostPort(const std::string& address, int port) {
  const bool ipv6 = address.find(':') != std::string::npos && address.front() != '[';
  return ipv6 ? absl::StrCat("[", address, "]:", port) : absl::StrCat(address, ":", port);
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  std::unique_ptr<Server> server(new Server(std::move(options)));
  absl::Status status = server->Init();
  if (!status.ok()) {
    server->Shutdown();
    return status;
  }
  return server;
}

absl::Status Server::Init() {
  if (options_.model_repository.empty()) {
    return absl::InvalidArgumentError("--model_repository is required");
  }
  if (options_.workers < 1) return absl::InvalidArgumentError("--workers must be >= 1");
  if (options_.max_queue_size < 1) {
    return absl::InvalidArgumentError("--max_queue_size must be >= 1");
  }
  if (options_.max_loop_iterations < 0) {
    return absl::InvalidArgumentError("--max_loop_iterations must be >= 0");
  }
  if (options_.grpc_port < 0 || options_.grpc_port > 65535) {
    return absl::InvalidArgumentError("--grpc_port must be in [0, 65535]");
  }
  if (options_.metrics_port < -1 || options_.metrics_port > 65535) {
    return absl::InvalidArgumentError("--metrics_port must be -1 (off) or in [0, 65535]");
  }

  metrics_ = std::make_unique<Metrics>();
  registry_ = std::make_unique<ModelRegistry>(
      ModelRegistry::Options{options_.model_repository, options_.max_loop_iterations,
                             options_.model_loader, metrics_.get()});
  if (absl::Status status = registry_->LoadAll(); !status.ok()) return status;

  pool_ = std::make_unique<WorkerPool>(options_.workers, options_.max_queue_size);
  service_ = std::make_unique<InferenceService>(registry_.get(), pool_.get(), metrics_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string grpc_address = HostPort(options_.address, options_.grpc_port);
  builder.AddListeningPort(grpc_address, grpc::InsecureServerCredentials(), &grpc_port_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind a busy port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", grpc_address, " (address in use or invalid)"));
  }
  grpc_server_->GetHealthCheckService()->SetServingStatus(true);

  if (options_.metrics_port >= 0) {
    absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
        MetricsExposer::Start(options_.address, options_.metrics_port, metrics_->registry());
    if (!exposer.ok()) return exposer.status();
    exposer_ = *std::move(exposer);
    metrics_port_ = exposer_->port();
  }
  return absl::OkStatus();
}

void Server::Shutdown() {
  absl::MutexLock lock(&shutdown_mutex_);
  if (shut_down_) return;
  shut_down_ = true;
  if (service_ != nullptr) service_->StartDraining();
  if (grpc_server_ != nullptr) {
    grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
    if (health != nullptr) health->SetServingStatus(false);
    LogInfo(absl::StrCat("shutting down: draining calls in flight (up to ",
                         absl::FormatDuration(options_.exit_timeout), ")"));
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + options_.exit_timeout));
    grpc_server_->Wait();
  }
  if (pool_ != nullptr) pool_->Shutdown();
  exposer_.reset();
}

Server::~Server() { Shutdown(); }

}  // namespace loopserve::server
