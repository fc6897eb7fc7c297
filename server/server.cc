#include "server/server.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "engine/base/status_macros.h"
#include "engine/engine.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/observability/logging.h"
#include "server/status_util.h"
#include "server/version.h"

namespace loopserve::server {
namespace {

absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is not a PEM file"));
  }
  return text.str();
}

absl::string_view ModeName(ModelControlMode mode) {
  switch (mode) {
    case ModelControlMode::kNone:
      return "none";
    case ModelControlMode::kPoll:
      return "poll";
    case ModelControlMode::kExplicit:
      return "explicit";
  }
  return "?";
}

// The memory this process may use: its cgroup's limit (v2, else v1) when set and lower than the
// physical memory.
int64_t AvailableMemoryBytes() {
  int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  for (const char* file :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(file);
    std::string text;
    int64_t limit = 0;
    if (in >> text && absl::SimpleAtoi(text, &limit) && limit > 0 && limit < bytes) {
      bytes = limit;  // "max" (no limit) does not parse
    }
  }
  return bytes;
}

std::string HostPort(const std::string& address, int port) {
  const bool ipv6 = address.find(':') != std::string::npos && address.front() != '[';
  return ipv6 ? absl::StrCat("[", address, "]:", port) : absl::StrCat(address, ":", port);
}

}  // namespace

absl::StatusOr<ModelControlMode> ParseModelControlMode(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "none") return ModelControlMode::kNone;
  if (lower == "poll") return ModelControlMode::kPoll;
  if (lower == "explicit") return ModelControlMode::kExplicit;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model control mode '", name, "' (expected none, poll or explicit)"));
}

Server::Server(ServerOptions options)
    : options_(std::move(options)), stop_(options_.stop != nullptr ? options_.stop : &own_stop_) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  std::unique_ptr<Server> server(new Server(std::move(options)));
  // No exception (std::bad_alloc of a load) leaves start-up: it fails with a status.
  absl::Status status = CatchExceptions("start-up: ", [&] { return server->Init(); });
  if (!status.ok()) {
    server->Shutdown();
    return status;
  }
  return server;
}

absl::Status Server::Init() {
  LS_RETURN_IF_ERROR(CheckOptions());
  LS_ASSIGN_OR_RETURN(const Transport transport, MakeTransport());
  const Limits limits = DeriveLimits();
  LogStart(limits);
  LS_RETURN_IF_ERROR(StartRegistry(limits));
  StartRunner(limits);
  LS_RETURN_IF_ERROR(StartGrpc(transport));
  LS_RETURN_IF_ERROR(StartHttp(transport));
  LS_RETURN_IF_ERROR(StartMetrics());
  if (options_.model_control_mode == ModelControlMode::kPoll &&
      options_.repository_poll_interval > absl::ZeroDuration()) {
    poller_ = std::thread([this] { PollRepository(); });
  }
  trimmer_ = std::thread([this] { TrimHeap(); });
  if (stop_->load()) return absl::CancelledError("start-up stopped by request");
  return absl::OkStatus();
}

absl::Status Server::CheckOptions() const {
  if (options_.model_repository.empty() == options_.config_path.empty()) {
    return absl::InvalidArgumentError(
        "give either --model_repository (a Triton-style repository) or --config_path (an "
        "OpenVINO Model Server config.json)");
  }
  if (options_.workers < 1) return absl::InvalidArgumentError("--workers must be >= 1");
  if (options_.intra_op_threads < 0) {
    return absl::InvalidArgumentError("--intra_op_threads must be >= 0");
  }
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
  if (options_.inline_run_limit < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--inline_run_limit_us must be >= 0");
  }
  if (options_.max_inline_runs < 0) {
    return absl::InvalidArgumentError("max_inline_runs must be >= 0");
  }
  if (options_.max_output_bytes < 0) {
    return absl::InvalidArgumentError("--max_output_bytes must be >= 0");
  }
  if (options_.max_request_memory_bytes < 0) {
    return absl::InvalidArgumentError("--max_request_memory_bytes must be >= 0");
  }
  if (options_.max_model_file_bytes < 0) {
    return absl::InvalidArgumentError("--max_model_file_bytes must be >= 0");
  }
  if (options_.http_port < -1 || options_.http_port > 65535) {
    return absl::InvalidArgumentError("--http_port must be -1 (disabled) or in [0, 65535]");
  }
  if (options_.http_threads < 1) return absl::InvalidArgumentError("--http_threads must be >= 1");
  if (options_.max_message_bytes < 1024) {
    return absl::InvalidArgumentError("--max_message_bytes must be >= 1024");
  }
  if (options_.tls_cert.empty() != options_.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!options_.tls_client_ca.empty() && options_.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
  }
  return absl::OkStatus();
}

absl::StatusOr<Server::Transport> Server::MakeTransport() const {
  Transport transport;
  transport.credentials = grpc::InsecureServerCredentials();
  transport.name = "plaintext";
  if (!options_.tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    LS_ASSIGN_OR_RETURN(pair.cert_chain, ReadPemFile(options_.tls_cert, "--tls_cert"));
    LS_ASSIGN_OR_RETURN(pair.private_key, ReadPemFile(options_.tls_key, "--tls_key"));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    transport.name = "TLS";
    if (!options_.tls_client_ca.empty()) {
      LS_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                          ReadPemFile(options_.tls_client_ca, "--tls_client_ca"));
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
      transport.name = "mutual TLS";
    }
    transport.credentials = grpc::SslServerCredentials(ssl);
  }

  return transport;
}

Server::Limits Server::DeriveLimits() const {
  Limits limits;
  // workers x intra-op threads <= cores: oversubscribed OpenMP teams spin against each other.
  limits.intra_op_threads = options_.intra_op_threads > 0
                                ? options_.intra_op_threads
                                : std::max(1, engine::AvailableCores() / options_.workers);
  limits.max_output_bytes =
      options_.max_output_bytes > 0 ? options_.max_output_bytes : options_.max_message_bytes;
  constexpr int64_t kMinAutoMemoryBytes = int64_t{64} << 20;
  limits.max_request_memory_bytes =
      options_.max_request_memory_bytes > 0
          ? options_.max_request_memory_bytes
          : std::max(kMinAutoMemoryBytes, AvailableMemoryBytes() / (2 * options_.workers));
  return limits;
}

void Server::LogStart(const Limits& limits) const {
  LogInfo(absl::StrCat(
      "loopserve ", kServerVersion, " starting: ",
      options_.config_path.empty() ? absl::StrCat("repository '", options_.model_repository, "'")
                                   : absl::StrCat("config '", options_.config_path, "'"),
      options_.disable_auto_complete_config ? " (auto-complete disabled)" : "", ", model control ",
      ModeName(options_.model_control_mode),
      options_.model_control_mode == ModelControlMode::kPoll
          ? absl::StrCat(" every ", absl::FormatDuration(options_.repository_poll_interval))
          : "",
      ", ", options_.workers, " workers x ", limits.intra_op_threads, " intra-op threads, queue ",
      options_.max_queue_size, ", max_loop_iterations ", options_.max_loop_iterations,
      ", max_output_bytes ", limits.max_output_bytes, ", max_request_memory_bytes ",
      limits.max_request_memory_bytes, ", max_message_bytes ", options_.max_message_bytes,
      ", inline runs under ", absl::FormatDuration(options_.inline_run_limit), ", loop_threads ",
      engine::LoopThreadsName(options_.loop_threads), ", precision ",
      PrecisionName(options_.precision), options_.force_precision ? " (forced)" : ""));
}

absl::Status Server::StartRegistry(const Limits& limits) {
  metrics_ = std::make_unique<Metrics>();
  ModelRegistry::Options registry_options;
  registry_options.root = options_.model_repository;
  registry_options.config_path = options_.config_path;
  registry_options.max_loop_iterations = options_.max_loop_iterations;
  registry_options.loop_threads = options_.loop_threads;
  registry_options.precision = options_.precision;
  registry_options.force_precision = options_.force_precision;
  registry_options.max_output_bytes = limits.max_output_bytes;
  registry_options.max_request_memory_bytes = limits.max_request_memory_bytes;
  registry_options.max_model_file_bytes = options_.max_model_file_bytes;
  registry_options.loader = options_.model_loader;
  registry_options.metrics = metrics_.get();
  registry_options.auto_complete = !options_.disable_auto_complete_config;
  registry_options.default_instance_count = options_.workers;
  registry_options.intra_op_threads = limits.intra_op_threads;
  registry_options.stop = stop_;
  registry_options.loader_threads = kLoaderThreads;
  registry_ = std::make_unique<ModelRegistry>(std::move(registry_options));
  const absl::Time loads_started = absl::Now();
  absl::Status loaded = LoadInitialModels();
  if (stop_->load()) {
    LogInfo(absl::StrCat("start-up stopped by request after ",
                         absl::ToInt64Milliseconds(absl::Now() - loads_started),
                         " ms of model loading"));
    return absl::CancelledError("start-up stopped by request");
  }
  return loaded;
}

void Server::StartRunner(const Limits& limits) {
  const int intra_op_threads = limits.intra_op_threads;
  // Short runs (inline_run_limit) go on the receiving thread when a worker slot is free: a
  // hand-off costs more than the run (issue 34). gRPC 1.51 runs callbacks on cores / 2 threads
  // (2 to 16); inline runs leave one of them free, since a run its version's recent runs promised
  // short may still be long (an endless Loop until its deadline) and the server must keep
  // receiving meanwhile.
  const int grpc_threads = std::clamp(engine::AvailableCores() / 2, 2, 16);
  const int max_inline_runs = options_.max_inline_runs > 0
                                  ? options_.max_inline_runs
                                  : std::max(1, std::min(options_.workers, grpc_threads - 1));
  pool_ = std::make_unique<WorkerPool>(
      options_.workers, options_.max_queue_size,
      [intra_op_threads] { engine::SetIntraOpThreads(intra_op_threads); }, max_inline_runs);
  InferenceRunner::Options runner_options;
  runner_options.inline_run_limit = options_.inline_run_limit;
  runner_ =
      std::make_unique<InferenceRunner>(registry_.get(), pool_.get(), *metrics_, runner_options);
  ServerApi::Options api_options;
  api_options.model_control = options_.model_control_mode == ModelControlMode::kExplicit;
  api_options.pool = pool_.get();
  api_options.unready_queue_depth = options_.unready_queue_depth;
  api_ = std::make_unique<ServerApi>(registry_.get(), runner_.get(), api_options);
  service_ = std::make_unique<InferenceService>(runner_.get(), api_.get());
}

absl::Status Server::StartGrpc(const Transport& transport) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string grpc_address = HostPort(options_.address, options_.grpc_port);
  builder.AddListeningPort(grpc_address, transport.credentials, &grpc_port_);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind a busy port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", grpc_address, " (address in use or invalid)"));
  }
  grpc_server_->GetHealthCheckService()->SetServingStatus(true);
  LogInfo(absl::StrCat("gRPC listening on ", HostPort(options_.address, grpc_port_), " (",
                       transport.name, ")"));
  return absl::OkStatus();
}

absl::Status Server::StartHttp(const Transport& transport) {
  if (options_.http_port < 0) return absl::OkStatus();
  HttpServer::Options http;
  http.address = options_.address;
  http.port = options_.http_port;
  http.threads = options_.http_threads;
  http.max_body_bytes = static_cast<uint64_t>(options_.max_message_bytes);
  http.tls_cert = options_.tls_cert;
  http.tls_key = options_.tls_key;
  http.tls_client_ca = options_.tls_client_ca;
  LS_ASSIGN_OR_RETURN(http_, HttpService::Start(http, runner_.get(), api_.get()));
  http_port_ = http_->port();
  LogInfo(absl::StrCat("HTTP listening on ", HostPort(options_.address, http_port_), " (",
                       transport.name, ")"));
  return absl::OkStatus();
}

absl::Status Server::StartMetrics() {
  if (options_.metrics_port < 0) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start(options_.address, options_.metrics_port, metrics_->collectable());
  if (!exposer.ok()) return exposer.status();
  exposer_ = *std::move(exposer);
  metrics_port_ = exposer_->port();
  LogInfo(
      absl::StrCat("metrics listening on ", HostPort(options_.address, metrics_port_), "/metrics"));
  return absl::OkStatus();
}

void Server::TrimHeap() {
  // gRPC reads a message whole before checking its size, into many small blocks that glibc keeps
  // in its arenas after they are freed: without this, one rejected 300 MB message leaves the
  // resident set tens of megabytes higher for good.
  while (!stop_polling_.WaitForNotificationWithTimeout(kTrimInterval)) {
    if (mallinfo2().fordblks > kTrimAboveBytes) malloc_trim(0);
  }
}

absl::Status Server::LoadInitialModels() {
  if (options_.model_control_mode != ModelControlMode::kExplicit) return registry_->LoadAll();
  for (const std::string& name : options_.load_models) {
    if (name == "*") {
      LS_RETURN_IF_ERROR(registry_->LoadAll());
      continue;
    }
    // A model that fails to load is reported (not ready) like in the other modes.
    absl::Status status = registry_->Load(name);
    if (absl::IsInvalidArgument(status) || absl::IsNotFound(status)) {
      return absl::InvalidArgumentError(absl::StrCat("--load_model: ", status.message()));
    }
  }
  return absl::OkStatus();
}

void Server::PollRepository() {
  // Loads never run on a gRPC or worker thread; requests keep using the versions they find.
  std::string last_error;  // logged once, not on every poll
  while (!stop_polling_.WaitForNotificationWithTimeout(options_.repository_poll_interval)) {
    // The loads run on the registry's loader pool: a model's long warm-up does not hold up the
    // next polls (nor the other models' updates).
    absl::Status status =
        CatchExceptions("repository poll: ", [&] { return registry_->StartPoll(); });
    if (stop_->load()) break;
    const std::string error(status.message());
    if (!status.ok() && error != last_error) {
      LogWarning(
          absl::StrCat("repository poll failed (the models keep serving as they are): ", error));
    } else if (status.ok() && !last_error.empty()) {
      LogInfo("repository poll succeeds again");
    }
    last_error = error;
  }
}

void Server::Shutdown() {
  // Before the lock: a load the poller (or an RPC) runs stops now, not when it would have ended.
  stop_->store(true);
  absl::MutexLock lock(&shutdown_mutex_);
  if (shut_down_) return;
  shut_down_ = true;
  if (api_ != nullptr && grpc_server_ != nullptr && options_.drain_delay > absl::ZeroDuration()) {
    // Not ready, still serving: a balancer's next health checks take this replica out of
    // rotation before any request to it is refused.
    api_->StopReady();
    grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
    if (health != nullptr) health->SetServingStatus(false);
    LogInfo(absl::StrCat("shutting down: not ready, still serving for ",
                         absl::FormatDuration(options_.drain_delay), " (--drain_delay_seconds)"));
    absl::SleepFor(options_.drain_delay);
  }
  const absl::Time deadline = absl::Now() + options_.exit_timeout;
  if (runner_ != nullptr) runner_->StartDraining();
  stop_polling_.Notify();
  if (poller_.joinable()) poller_.join();
  if (trimmer_.joinable()) trimmer_.join();
  if (grpc_server_ != nullptr) {
    grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
    if (health != nullptr) health->SetServingStatus(false);
    LogInfo(absl::StrCat("shutting down: NOT_SERVING, waiting for requests in flight (up to ",
                         absl::FormatDuration(options_.exit_timeout), ")"));
    // Still answering (health NOT_SERVING, new requests UNAVAILABLE) while the in-flight finish.
    const bool idle = runner_->WaitForIdle(deadline);
    if (!idle) {
      LogWarning("exit timeout reached: cancelling the requests still running");
      // Inline runs never see gRPC's cancellation while their handler runs, and queued ones
      // would still be started by the draining pool: the flag reaches all of them.
      runner_->CancelAll();
    }
    LogDebug("shutdown: requests in flight done");
    grpc_server_->Shutdown(absl::ToChronoTime(idle ? absl::Now() + absl::Seconds(1) : deadline));
    grpc_server_->Wait();
    LogDebug("shutdown: gRPC stopped");
  }
  // Every request has been answered (or cancelled and answered): their replies go out, then the
  // connections close.
  if (http_ != nullptr) http_->Shutdown(absl::Seconds(1));
  LogDebug("shutdown: HTTP stopped");
  if (pool_ != nullptr) pool_->Shutdown();
  LogDebug("shutdown: workers joined");
  exposer_.reset();
  LogInfo("shutdown complete");
}

Server::~Server() { Shutdown(); }

}  // namespace loopserve::server
